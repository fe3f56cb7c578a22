// The PyTorch profiler (Kineto) reader on hand-made traces with known answers: what becomes
// compute, communication, memory operations, steps and memory counters; ranks from
// distributedInfo; clock alignment; .json.gz; and one-line errors for bad input.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <zlib.h>
#include <nlohmann/json.hpp>

#include "common/kineto_traces.h"
#include "core/runtime/allocator.h"
#include "core/trace/kineto_raw.h"
#include "core/trace/kineto_reader.h"
#include "core/trace/trace_files.h"

namespace test_kineto_reader {

using namespace mgpu::trace;
using mgpu::testing::kineto_gpu_rank0;
using mgpu::testing::kineto_gpu_rank1;
using nlohmann::json;

namespace {

constexpr double us = 1e-6;

const Event& find_event(const Trace& t, int rank, const std::string& name) {
  for (const Event& e : t.events)
    if (e.rank == rank && e.name == name) return e;
  FAIL("no event " << name << " on rank " << rank);
  throw;
}

KinetoTrace parse(const std::vector<json>& docs, KinetoOptions options = {}) {
  std::vector<std::string> texts, sources;
  for (const json& d : docs) texts.push_back(d.dump());
  std::vector<std::string_view> views(texts.begin(), texts.end());
  for (size_t i = 0; i < docs.size(); ++i) sources.push_back("r" + std::to_string(i) + ".json");
  return parse_kineto_traces(views, sources, options);
}

std::string error_of(const json& doc) {
  try {
    parse({doc});
  } catch (const TraceFormatError& e) {
    return e.what();
  }
  return "(no error)";
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("mgpu_kineto_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("kineto: GPU kernels, NCCL, memcpy, steps and memory map onto the trace model") {
  // Files given rank 1 first: distributedInfo orders them.
  const KinetoTrace k = parse({kineto_gpu_rank1(), kineto_gpu_rank0()});
  const Trace& t = k.trace;
  REQUIRE(t.num_ranks == 2);
  CHECK(t.metadata["distributed_ranks"] == json({0, 1}));
  CHECK(t.metadata["align"] == "first-step");
  // Rank 1 (distributedInfo.rank 1): its first step started at 1000 us, rank 0's at 501000 us;
  // rank 0's earliest event (a runtime call) is 10 us before its step, so both steps start at
  // 10 us.
  const Event& gemm = find_event(t, 1, "sm80_gemm");
  CHECK(gemm.lane == Lane::compute);
  CHECK(gemm.cat == cat::compute);
  CHECK(gemm.start == Approx(30 * us).epsilon(1e-12));
  CHECK(gemm.dur == Approx(30 * us).epsilon(1e-12));
  const Event& copy = find_event(t, 1, "Memcpy HtoD (Pageable -> Device)");
  CHECK(copy.lane == Lane::compute);
  CHECK(copy.cat == cat::memory);
  const Event& nccl =
      find_event(t, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)");
  CHECK(nccl.lane == Lane::comm);
  CHECK(nccl.op == "all_reduce");
  CHECK(nccl.bytes == 4096);  // 1024 Float elements
  CHECK(nccl.group == "0");
  const Event& step = find_event(t, 1, "ProfilerStep#5");
  CHECK(step.lane == Lane::step);
  CHECK(step.step == 5);
  CHECK(step.start == Approx(10 * us).epsilon(1e-12));
  // The CPU range ends at 1100 us; the last op launched inside it (add, launched by 1097 us)
  // ends at 1140 us: the step ends there (1140 - 990 = 150 us after alignment).
  CHECK(step.end() == Approx(150 * us).epsilon(1e-12));
  // Launch times: the runtime call's end, matched by correlation.
  for (size_t i = 0; i < t.events.size(); ++i)
    if (&t.events[i] == &gemm) CHECK(k.launch_end[i] == Approx(25 * us).epsilon(1e-12));
  // Host calls: five runtime calls of 5, 5, 5, 20 and 2 us on rank 1.
  CHECK(k.host[1].calls == 5);
  CHECK(k.host[1].seconds == Approx(37 * us).epsilon(1e-12));
  // CPU ops of a GPU trace are not drawn.
  for (const Event& e : t.events) CHECK(e.name != "aten::mm");
  // Memory: the GPU's samples only (the CPU's 99999 is not the device's).
  REQUIRE(t.counters.size() == 2);
  const auto workspace = static_cast<size_t>(mgpu::MemCategory::workspace);
  CHECK(t.counters[0].rank == 1);
  CHECK(t.counters[1].bytes[workspace] == 5000);
  CHECK(t.counters[0].time == Approx(15 * us).epsilon(1e-12));
}

TEST_CASE("kineto: clocks as recorded with Align::clock") {
  KinetoOptions options;
  options.align = KinetoOptions::Align::clock;
  const Trace t = parse({kineto_gpu_rank1(), kineto_gpu_rank0()}, options).trace;
  CHECK(t.metadata["align"] == "clock");
  // The earliest event of any rank is rank 1's step at 1000 us: time 0.
  CHECK(find_event(t, 1, "ProfilerStep#5").start == 0);
  CHECK(find_event(t, 0, "ProfilerStep#5").start == Approx(500000 * us).epsilon(1e-12));
}

TEST_CASE("kineto: ranks follow the files' order without distributedInfo") {
  json a = kineto_gpu_rank1(), b = kineto_gpu_rank0();
  a.erase("distributedInfo");
  const Trace t = parse({a, b}).trace;
  CHECK(t.metadata["distributed_ranks"] == json({-1, 0}));
  CHECK(find_event(t, 0, "sm80_gemm").dur == Approx(30 * us).epsilon(1e-12));
}

TEST_CASE("kineto: a CPU-only job (legacy array format): top-level ops compute, gloo comm") {
  const json events = json::array({
      {{"name", "ProfilerStep#0"},
       {"ph", "X"},
       {"ts", 0},
       {"dur", 100},
       {"tid", 1},
       {"pid", "CPU functions"}},
      {{"name", "aten::linear"},
       {"ph", "X"},
       {"ts", 5},
       {"dur", 25},
       {"tid", 1},
       {"pid", "CPU functions"}},
      {{"name", "aten::addmm"},
       {"ph", "X"},
       {"ts", 6},
       {"dur", 23},
       {"tid", 1},
       {"pid", "CPU functions"}},
      {{"name", "c10d::allreduce_"},
       {"ph", "X"},
       {"ts", 35},
       {"dur", 2},
       {"tid", 1},
       {"pid", "CPU functions"}},
      {{"name", "gloo:all_reduce"},
       {"ph", "X"},
       {"ts", 40},
       {"dur", 50},
       {"tid", 2},
       {"pid", "CPU functions"}},
      {{"name", "aten::div_"},
       {"ph", "X"},
       {"ts", 92},
       {"dur", 3},
       {"tid", 1},
       {"pid", "CPU functions"}},
  });
  const Trace t = parse({events}).trace;
  REQUIRE(t.num_ranks == 1);
  std::vector<std::string> compute, comm;
  for (const Event& e : t.events) {
    if (e.lane == Lane::compute) compute.push_back(e.name);
    if (e.lane == Lane::comm) comm.push_back(e.name + "/" + e.op);
  }
  std::sort(compute.begin(), compute.end());
  CHECK(compute == std::vector<std::string>{"aten::div_", "aten::linear", "c10d::allreduce_"});
  CHECK(comm == std::vector<std::string>{"gloo:all_reduce/all_reduce"});
  CHECK(t.metadata["microbatch_annotations"] == 0);
}

TEST_CASE("kineto: user annotations naming micro-batches mark a pipeline") {
  json doc = mgpu::testing::kineto_gpu_rank0();
  for (const char* name : {"forward mb3", "Stage 1 Backward (micro-batch 0)", "bwd_microbatch_12",
                           "mb2 fwd", "optimizer", "forward", "mbconv forward"})
    doc["traceEvents"].push_back(mgpu::testing::kineto_x("user_annotation", name, 501001, 1));
  CHECK(parse({doc}).trace.metadata["microbatch_annotations"] == 4);
}

TEST_CASE("kineto: .json.gz files, a folder, and the project's own trace told apart") {
  const auto dir = fresh_dir("gz");
  const std::string text0 = kineto_gpu_rank0().dump(), text1 = kineto_gpu_rank1().dump();
  {
    gzFile f = gzopen((dir / "rank-1.json.gz").c_str(), "wb");
    REQUIRE(f);
    REQUIRE(gzwrite(f, text1.data(), static_cast<unsigned>(text1.size())) == int(text1.size()));
    gzclose(f);
    std::ofstream(dir / "rank-0.json") << text0;
    std::ofstream(dir / "notes.txt") << "not a trace";
  }
  CHECK(is_kineto_file(dir / "rank-1.json.gz"));
  CHECK(is_kineto_file(dir / "rank-0.json"));
  std::ofstream(dir / "legacy.json") << "\n [{\"name\": \"ProfilerStep#0\"}]";
  CHECK(is_kineto_file(dir / "legacy.json"));
  std::filesystem::remove(dir / "legacy.json");
  const RunTrace from_folder = read_run_trace({dir.string()});
  const RunTrace from_files =
      read_run_trace({(dir / "rank-1.json.gz").string(), (dir / "rank-0.json").string()});
  CHECK(from_folder.kineto);
  CHECK(from_folder.trace.events == from_files.trace.events);
  CHECK(from_folder.trace.events == parse({kineto_gpu_rank1(), kineto_gpu_rank0()}).trace.events);
  // An mgpu trace is not sniffed as Kineto, and cannot be a rank of a Kineto run.
  std::ofstream(dir / "own.json") << R"({"traceEvents":[],"mgpu":{"format":"mgpu-trace"}})";
  CHECK_FALSE(is_kineto_file(dir / "own.json"));
  CHECK_THROWS_WITH(read_run_trace({(dir / "rank-0.json").string(), (dir / "own.json").string()}),
                    Catch::Contains("own.json: not a PyTorch profiler trace"));
  const auto empty = fresh_dir("empty");
  CHECK_THROWS_WITH(read_run_trace({empty.string()}),
                    Catch::Contains("holds no .json or .json.gz trace files"));
}

TEST_CASE("kineto: bad input is one line naming the file, event and field, with the limits") {
  json ts_text = kineto_gpu_rank0();
  ts_text["traceEvents"][1]["ts"] = "soon";
  CHECK_THAT(error_of(ts_text),
             Catch::StartsWith("r0.json: traceEvents[1].ts must be a number of microseconds, "
                               "got a string") &&
                 Catch::Contains("Kineto reader limits: 50000000 events"));
  json no_dur = kineto_gpu_rank0();
  no_dur["traceEvents"][0].erase("dur");
  CHECK_THAT(error_of(no_dur), Catch::Contains("traceEvents[0].dur missing"));
  json negative = kineto_gpu_rank0();
  negative["traceEvents"][2]["dur"] = -4;
  CHECK_THAT(error_of(negative), Catch::Contains("traceEvents[2].dur -4 is outside 0.."));
  json bad_step = kineto_gpu_rank0();
  bad_step["traceEvents"][0]["name"] = "ProfilerStep#x";
  CHECK_THAT(error_of(bad_step), Catch::Contains("is not ProfilerStep#<step number>"));
  json bad_rank = kineto_gpu_rank0();
  bad_rank["distributedInfo"]["rank"] = "zero";
  CHECK_THAT(error_of(bad_rank), Catch::Contains("distributedInfo.rank must be an integer"));
  CHECK_THAT(error_of(json{{"traceEvents", json::object()}}),
             Catch::Contains("traceEvents must be an array"));
  CHECK_THAT(error_of(json{{"schemaVersion", 1}}), Catch::Contains("no \"traceEvents\" array"));
  CHECK_THAT(error_of(json{{"traceEvents", {1, 2}}}),
             Catch::Contains("traceEvents[0] must be an object"));
  CHECK_THROWS_WITH(parse_kineto_traces({R"({"traceEvents":[{"ph":"X")"}, {"t.json"}),
                    Catch::StartsWith("t.json: truncated JSON at byte"));
  CHECK_THROWS_WITH(parse_kineto_traces({"nonsense"}, {"t.json"}),
                    Catch::StartsWith("t.json: invalid JSON at byte"));
  CHECK_THROWS_WITH(parse({kineto_gpu_rank0(), kineto_gpu_rank0()}),
                    Catch::Contains("r0.json and r1.json are both rank 0"));
  for (const std::string& msg : {error_of(ts_text), error_of(no_dur)})
    CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("kineto: collective names and dtype sizes") {
  using mgpu::trace::kineto::collective_op;
  using mgpu::trace::kineto::dtype_bytes;
  CHECK(collective_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)") == "all_reduce");
  CHECK(collective_op("ncclKernel_ReduceScatter_RING_LL_Sum_half") == "reduce_scatter");
  CHECK(collective_op("_allgather_base") == "all_gather");
  CHECK(collective_op("all_to_all") == "all_to_all");
  CHECK(collective_op("ncclDevKernel_SendRecv(x)") == "send");
  CHECK(collective_op("broadcast") == "broadcast");
  CHECK(collective_op("aten::mm") == "");
  CHECK(dtype_bytes("Float") == 4);
  CHECK(dtype_bytes("c10::BFloat16") == 2);
  CHECK(dtype_bytes("Long") == 8);
  CHECK(dtype_bytes("Byte") == 1);
  CHECK(dtype_bytes("Quantum") == 0);
}

TEST_CASE("kineto: the recorded 2-process gloo job opens") {
  const std::string dir = MGPU_SOURCE_DIR "/tests/data/kineto/gloo-cpu";
  const RunTrace run = read_run_trace({dir});
  REQUIRE(run.trace.num_ranks == 2);
  for (int rank = 0; rank < 2; ++rank) {
    int steps = 0, comm = 0, compute = 0;
    for (const Event& e : run.trace.events) {
      if (e.rank != rank) continue;
      steps += e.lane == Lane::step;
      comm += e.lane == Lane::comm && e.op == "all_reduce";
      compute += e.lane == Lane::compute;
    }
    CHECK(steps == 3);  // ProfilerStep#0..2
    CHECK(comm == 12);  // four parameters' all-reduces a step
    CHECK(compute > 0);
  }
}

namespace {

// A trace of a few MiB: kernels whose names (of many lengths, with escapes) fall across the
// reader's 1 MiB chunks, and timestamps of 16 significant digits, as Kineto writes them.
json big_trace() {
  json doc = kineto_gpu_rank0();
  for (int i = 0; i < 24000; ++i) {
    const std::string name = "kernel_" + std::string(static_cast<size_t>(i % 173), 'k') +
                             "<\"float\">\\u" + std::to_string(i);
    doc["traceEvents"].push_back(
        mgpu::testing::kineto_x("kernel", name.c_str(), 1732841234567.891 + i, 0.125));
  }
  return doc;
}

void write_gz(const std::filesystem::path& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, text.data(), static_cast<unsigned>(text.size())) == int(text.size()));
  gzclose(f);
}

}  // namespace

TEST_CASE("kineto: a file read chunk by chunk (plain and .gz) equals its text parsed whole") {
  const auto dir = fresh_dir("chunks");
  const std::string text = big_trace().dump();
  REQUIRE(text.size() > size_t{3} << 20);  // several of the reader's chunks
  std::ofstream(dir / "big.json") << text;
  write_gz(dir / "big.json.gz", text);
  const KinetoTrace whole = parse_kineto_traces({text}, {"big.json"});
  const KinetoTrace plain = read_kineto_traces({dir / "big.json"});
  const KinetoTrace gz = read_kineto_traces({dir / "big.json.gz"});
  REQUIRE(whole.trace.events.size() == 24000 + 3);  // + the base trace's two kernels and step
  CHECK(plain.trace.events == whole.trace.events);
  CHECK(gz.trace.events == whole.trace.events);
  // 16 significant digits of microseconds arrive exactly (correctly rounded, as strtod).
  const auto raw = mgpu::trace::kineto::parse_raw_text(text, "big.json");
  CHECK(raw.gpu.back().ts == 1732841234567.891 + 23999);
  CHECK(raw.gpu.back().dur == 0.125);
  CHECK(raw.names[raw.gpu.back().name] ==
        "kernel_" + std::string(23999 % 173, 'k') + "<\"float\">\\u23999");
}

TEST_CASE("kineto: hostile files: nesting, bad UTF-8 in a kept name, a broken .gz") {
  const std::string deep = R"({"traceEvents":[{"ph":"X","args":)" + std::string(100, '[');
  CHECK_THROWS_WITH(parse_kineto_traces({deep}, {"deep.json"}),
                    Catch::StartsWith("deep.json: JSON nested deeper than 64 levels") &&
                        Catch::Contains("64 levels of nesting"));
  const std::string latin1 = R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"caf)"
                             "\xe9"
                             R"(","ts":1,"dur":2}]})";
  CHECK_THROWS_WITH(parse_kineto_traces({latin1}, {"l.json"}),
                    Catch::StartsWith("l.json: traceEvents[0].name is not valid UTF-8"));
  // Bad UTF-8 in a string the reader does not keep is not looked at.
  const std::string unkept =
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"note":"caf)"
      "\xe9"
      R"("}}]})";
  CHECK(parse_kineto_traces({unkept}, {"u.json"}).trace.events.size() == 1);
  // A read error on the prefetch thread reaches the caller as the usual one line.
  const auto dir = fresh_dir("broken_gz");
  std::ofstream(dir / "broken.json.gz")
      << std::string("\x1f\x8b\x08\x00", 4) << std::string(4096, 'x');
  CHECK_THROWS_WITH(read_kineto_traces({dir / "broken.json.gz"}),
                    Catch::Contains("broken.json.gz: not readable as gzip or JSON"));
}

}  // namespace test_kineto_reader

// core/trace/breakdown.h and `mgpu analyze` on hand-made traces with exact answers: the temporal
// breakdown (parts sum to the step), idle by cause, overlap, straggler, top operations; and on a
// lesson's own trace, the same figures as the lesson's per-rank table (analysis.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/kineto_traces.h"
#include "common/trace_events.h"
#include "core/trace/breakdown.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/kineto_reader.h"
#include "unit/mgpu_cli.h"

namespace test_trace_breakdown {

using namespace mgpu::trace;
using mgpu::testing::run_mgpu;
using nlohmann::json;

namespace {

constexpr double us = 1e-6;

Approx exact(double seconds) {
  return Approx(seconds).epsilon(1e-12).margin(1e-15);
}

KinetoTrace two_gpu_step() {
  const std::string a = mgpu::testing::kineto_gpu_rank1().dump();
  const std::string b = mgpu::testing::kineto_gpu_rank0().dump();
  return parse_kineto_traces({a, b}, {"rank1.json", "rank0.json"});
}

}  // namespace

TEST_CASE("breakdown: compute, memory, exposed comm and idle by cause are exact") {
  const KinetoTrace k = two_gpu_step();
  REQUIRE(trace_steps(k.trace) == std::vector<int>{5});
  const StepBreakdown b = breakdown(k.trace, 5, k.launch_end);
  CHECK(b.window.begin == exact(10 * us));
  CHECK(b.window.end == exact(150 * us));
  REQUIRE(b.ranks.size() == 2);
  const RankBreakdown& r1 = b.ranks[1];
  CHECK(r1.compute == exact(45 * us));         // gemm 30 + relu 10 + add 5
  CHECK(r1.exposed_memory == exact(10 * us));  // memcpy [1040,1060] minus the gemm's [1040,1050]
  CHECK(r1.exposed_comm == exact(40 * us));    // all-reduce [1055,1100] minus [1055,1060]
  CHECK(r1.device_idle == exact(45 * us));
  CHECK(r1.idle_by_cause.host == exact(40 * us));   // [1000,1020] and [1100,1120]
  CHECK(r1.idle_by_cause.kernel == exact(5 * us));  // [1130,1135]: add was queued at 1097
  CHECK(r1.idle_by_cause.other == exact(0));
  CHECK(r1.summary.overlap == exact(5 * us));
  CHECK(r1.summary.overlap_fraction == Approx(5.0 / 45).epsilon(1e-12));
  CHECK(r1.summary.bytes_sent == 4096);
  CHECK(r1.summary.peak_memory.total == 5000);
  for (const RankBreakdown& r : b.ranks)
    CHECK(r.compute + r.exposed_memory + r.exposed_comm + r.device_idle ==
          exact(b.window.length()));
  const RankBreakdown& r0 = b.ranks[0];
  CHECK(r0.compute == exact(100 * us));
  CHECK(r0.exposed_comm == exact(40 * us));
  CHECK(r0.device_idle == exact(0));
  CHECK(b.straggler == 0);  // 100 us of work against rank 1's 55
  CHECK(b.straggler_lead == exact(45 * us));
}

TEST_CASE("breakdown_steps gives every step's breakdown() in one pass") {
  // The lesson trace of three steps, and the hand-made one: each step equal to breakdown()'s.
  const std::string path = mgpu::testing::temp_path("breakdown_steps.json");
  REQUIRE(run_mgpu(mgpu::testing::with_tiny_model({"run", "pipeline", "--ranks", "2",
                                                   "--microbatches", "4", "--trace", path, "-q"}))
              .code == 0);
  const Trace t = read_chrome_trace(path);
  const std::vector<StepBreakdown> all = breakdown_steps(t);
  REQUIRE(all.size() == trace_steps(t).size());
  for (const StepBreakdown& b : all) {
    const StepBreakdown one = breakdown(t, b.step);
    CHECK(b.window == one.window);
    for (size_t r = 0; r < b.ranks.size(); ++r) {
      CHECK(b.ranks[r].compute == one.ranks[r].compute);
      CHECK(b.ranks[r].device_idle == one.ranks[r].device_idle);
      CHECK(b.ranks[r].summary.overlap == one.ranks[r].summary.overlap);
      CHECK(b.ranks[r].summary.bytes_sent == one.ranks[r].summary.bytes_sent);
      CHECK(b.ranks[r].summary.peak_memory == one.ranks[r].summary.peak_memory);
    }
  }
  const KinetoTrace k = two_gpu_step();
  const auto steps = breakdown_steps(k.trace, k.launch_end);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].ranks[1].idle_by_cause.host == exact(40 * us));
}

TEST_CASE("breakdown_steps on steps that all overlap (hostile): the same figures, bounded memory") {
  // 2000 steps each spanning the whole run: dealing events to steps would copy each event 2000
  // times; the pass gives way to one scan per step, with the same answers.
  Trace t;
  t.num_ranks = 1;
  t.events.push_back(mgpu::testing::make_event("k", cat::compute, 0, Lane::compute, 1, 2));
  t.events.push_back(mgpu::testing::make_event("c", cat::comm, 0, Lane::comm, 2, 4));
  for (int s = 0; s < 2000; ++s) {
    Event step = mgpu::testing::make_event("step", cat::step, 0, Lane::step, 0, 10 + s * 1e-3);
    step.step = s;
    t.events.push_back(step);
  }
  const std::vector<StepBreakdown> all = breakdown_steps(t);
  REQUIRE(all.size() == 2000);
  for (int s : {0, 999, 1999}) {
    CHECK(all[s].step == s);
    CHECK(all[s].ranks[0].compute == breakdown(t, s).ranks[0].compute);
    CHECK(all[s].ranks[0].device_idle == exact(10 + s * 1e-3 - 5));
  }
}

TEST_CASE("breakdown: without launch times every idle gap is 'other'") {
  const KinetoTrace k = two_gpu_step();
  const StepBreakdown b = breakdown(k.trace, 5);
  CHECK(b.ranks[1].idle_by_cause.other == exact(45 * us));
  CHECK(b.ranks[1].idle_by_cause.host == 0);
}

TEST_CASE("breakdown: top operations per category") {
  const KinetoTrace k = two_gpu_step();
  const auto top = top_kernels(k.trace, 1, analysis_window(k.trace), 1);
  REQUIRE(top.size() == 3);
  CHECK(top[0].category == "comm");
  CHECK(top[0].seconds == exact(45 * us));
  CHECK(top[1].category == "compute");
  CHECK(top[1].name == "sm80_gemm");
  CHECK(top[1].count == 1);
  CHECK(top[2].category == "memory");
  CHECK(top[2].seconds == exact(20 * us));
}

TEST_CASE("mgpu analyze: a PyTorch run's files, text and --json") {
  const auto dir = std::filesystem::temp_directory_path() / "mgpu_analyze_kineto";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "rank1.json") << mgpu::testing::kineto_gpu_rank1().dump();
  std::ofstream(dir / "rank0.json") << mgpu::testing::kineto_gpu_rank0().dump();
  const auto text = run_mgpu({"analyze", dir.string()});
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("2 ranks, PyTorch profiler trace (clocks aligned: "
                                       "first-step)"));
  CHECK_THAT(text.out, Catch::Contains("step 5 (140.0 us)"));
  CHECK_THAT(text.out, Catch::Contains("straggler: rank 0, 45.0 us more work"));
  CHECK_THAT(text.out, Catch::Contains("rank 1: 5 CUDA runtime calls on the host, 37.0 us"));
  const auto js = run_mgpu({"analyze", dir.string(), "--json"});
  REQUIRE(js.code == 0);
  const json doc = json::parse(js.out);
  const json& r1 = doc["steps"][0]["ranks"][1];
  CHECK(r1["rank"] == 1);
  CHECK(r1["compute"].get<double>() == exact(45 * us));
  CHECK(r1["idle_by_cause"]["host"].get<double>() == exact(40 * us));
  CHECK(doc["steps"][0]["straggler"]["rank"] == 0);
  const auto bad = run_mgpu({"analyze", (dir / "missing.json").string()});
  CHECK(bad.code == 2);
  CHECK(mgpu::testing::count_lines(bad.err) == 1);
  const auto no_step = run_mgpu({"analyze", dir.string(), "--step", "9"});
  CHECK(no_step.code == 2);
  CHECK_THAT(no_step.err, Catch::Contains("trace has no step 9"));
}

TEST_CASE("mgpu analyze on a lesson's trace agrees with the lesson's per-rank table") {
  const std::string path = mgpu::testing::temp_path("analyze_lesson.json");
  const auto run = run_mgpu(mgpu::testing::with_tiny_model(
      {"run", "pipeline", "--ranks", "2", "--microbatches", "4", "--trace", path, "-q"}));
  REQUIRE(run.code == 0);
  const Trace t = read_chrome_trace(path);
  const std::vector<int> steps = trace_steps(t);
  REQUIRE(!steps.empty());
  const TraceSummary table = analyze(t, steps.back());  // what the lesson and dashboard show
  // The lesson prints step N + 1 for the trace's step N; analyze does as the lesson does.
  const auto js = run_mgpu({"analyze", path, "--json", "--step", std::to_string(steps.back() + 1)});
  REQUIRE(js.code == 0);
  const json doc = json::parse(js.out);
  CHECK(doc["source"] == "mgpu");
  CHECK(doc["steps"][0]["step"] == steps.back() + 1);
  const json& ranks = doc["steps"][0]["ranks"];
  REQUIRE(ranks.size() == table.ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankSummary& s = table.ranks[r];
    CHECK(ranks[r]["busy"].get<double>() == s.busy);
    CHECK(ranks[r]["comm"].get<double>() == s.comm);
    CHECK(ranks[r]["overlap"].get<double>() == s.overlap);
    CHECK(ranks[r]["bubble_fraction"].get<double>() == s.bubble_fraction);
    CHECK(ranks[r]["exposed_comm"].get<double>() == s.exposed_comm);
    CHECK(ranks[r]["idle"].get<double>() == exact(s.idle - s.exposed_comm));
    CHECK(ranks[r]["idle_by_cause"]["other"].get<double>() == exact(s.idle - s.exposed_comm));
  }
  const auto text = run_mgpu({"analyze", path});
  CHECK_THAT(text.out, Catch::Contains("bubble"));  // a pipeline: micro-batches are annotated
}

}  // namespace test_trace_breakdown

// Chrome trace writer/reader: exact round trips, and a clear TraceFormatError (never a crash) for
// anything that is not a readable trace.
#include <catch2/catch.hpp>

#include "common/trace_events.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/trace/chrome_trace.h"

namespace test_trace {

using namespace mgpu::trace;
using nlohmann::json;

using mgpu::testing::make_event;

namespace {

Trace sample_trace() {
  Trace t;
  t.num_ranks = 3;  // rank 2 records nothing but must survive the round trip
  t.metadata = {{"lesson", "pipeline_1f1b"},
                {"clock", "modeled"},
                {"num_ranks", 99},  // a metadata key that must not collide with the header
                {"predictions", {{"bubble_fraction", 0.2727}}}};
  Event fwd = make_event("fwd mb0", cat::forward, 0, Lane::compute, 0.1, 1.0 / 3);
  fwd.microbatch = 0;
  fwd.layer = 2;
  fwd.chunk = 1;
  fwd.flops = 1.5e12;
  fwd.bytes = 4096;
  Event send = make_event("send", cat::comm, 1, Lane::comm, 0, 0);
  send.start = 123.456789e-6;
  send.dur = 7e-9;
  send.peer = 0;
  send.bytes = int64_t(1) << 40;
  send.sent_bytes = (int64_t(1) << 40) + 3;
  send.wait = 3e-9;  // of its 7 ns, waiting for the partner (exact through the JSON)
  send.group = "pp0";
  send.op = "send";
  send.seq = 17;
  Event dispatch = make_event("dispatch counts", cat::comm, 0, Lane::comm, 0.5, 1e-6);
  dispatch.op = "all_to_all";
  dispatch.counts = {9, 0, int64_t(1) << 40, 4};  // an expert exchange's tokens per expert
  Event step = make_event("step 3", cat::step, 1, Lane::step, 0, 2.5);
  step.step = 3;
  t.events = {fwd, send, dispatch, step};
  CounterSample c0{.rank = 0, .time = 0.3, .bytes = {1, 2, 3, 4, 5, 6}};
  CounterSample c1{.rank = 1, .time = 1e-7, .bytes = {int64_t(80) << 30, 0, 0, 0, 0, 0}};
  t.counters = {c0, c1};
  return t;
}

std::string to_text(const Trace& t) {
  std::ostringstream out;
  write_chrome_trace(t, out);
  return out.str();
}

void require_same(const Trace& a, const Trace& b) {
  REQUIRE(a.num_ranks == b.num_ranks);
  REQUIRE(a.metadata == b.metadata);
  REQUIRE(a.events.size() == b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) REQUIRE(a.events[i] == b.events[i]);
  REQUIRE(a.counters == b.counters);
}

std::string error_of(std::string_view text) {
  try {
    parse_chrome_trace(text);
  } catch (const TraceFormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("chrome trace: write then read gives the same trace") {
  const Trace original = sample_trace();
  require_same(parse_chrome_trace(to_text(original)), original);
}

TEST_CASE("chrome trace: file round trip") {
  const auto path = std::filesystem::temp_directory_path() / "mgpu_test_trace_roundtrip.json";
  const Trace original = sample_trace();
  write_chrome_trace(original, path);
  require_same(read_chrome_trace(path), original);
  std::filesystem::remove(path);
}

TEST_CASE("chrome trace: seconds survive the microsecond conversion bit for bit") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> seconds(0.0, 100.0);
  Trace t;
  t.num_ranks = 1;
  for (int i = 0; i < 2000; ++i) {
    t.events.push_back(
        make_event("k", cat::compute, 0, Lane::compute, seconds(rng), seconds(rng) * 1e-6));
    t.counters.push_back({.time = seconds(rng)});
  }
  require_same(parse_chrome_trace(to_text(t)), t);
}

TEST_CASE("chrome trace: exact seconds are stored only where microseconds would not round trip") {
  Trace t;
  t.num_ranks = 1;
  t.events.push_back(make_event("nice", cat::compute, 0, Lane::compute, 0.25, 0.5));
  t.events.push_back(make_event("awkward", cat::compute, 0, Lane::compute, 9.014274576114836, 1));
  REQUIRE(9.014274576114836 * 1e6 / 1e6 != 9.014274576114836);  // why the exact field exists
  const json doc = json::parse(to_text(t));
  const json& events = doc["traceEvents"];
  const json& nice = events[events.size() - 2];
  const json& awkward = events.back();
  CHECK_FALSE(nice.contains("ts_s"));
  CHECK_FALSE(nice.contains("dur_s"));
  CHECK(awkward["ts_s"].get<double>() == 9.014274576114836);
  require_same(parse_chrome_trace(doc.dump()), t);
}

TEST_CASE("chrome trace: the checked-in fixture loads") {
  const Trace t = read_chrome_trace(MGPU_SOURCE_DIR "/tests/data/traces/small_2rank.json");
  REQUIRE(t.num_ranks == 2);
  REQUIRE(t.events.size() == 7);
  REQUIRE(t.counters.size() == 2);
  CHECK(t.events[4].rank == 1);
  CHECK(t.events[4].start == 120e-6);
  CHECK(t.events[3].op == "send");
  CHECK(t.events[3].bytes == 1048576);
  CHECK(t.counters[1].bytes[5] == 512);
  CHECK(t.metadata["predictions"]["bubble_fraction"] == 0.25);
}

TEST_CASE("chrome trace: layout follows the Chrome Trace Event format") {
  const json doc = json::parse(to_text(sample_trace()));
  REQUIRE(doc["displayTimeUnit"] == "ns");
  REQUIRE(doc["mgpu"]["format"] == "mgpu-trace");
  REQUIRE(doc["mgpu"]["version"] == 1);
  REQUIRE(doc["mgpu"]["num_ranks"] == 3);
  REQUIRE(doc["mgpu"]["metadata"]["lesson"] == "pipeline_1f1b");

  int process_names = 0, thread_names = 0;
  const json* fwd = nullptr;
  const json* counter = nullptr;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++process_names;
    if (e["ph"] == "M" && e["name"] == "thread_name") ++thread_names;
    if (e["ph"] == "X" && e["name"] == "fwd mb0") fwd = &e;
    if (e["ph"] == "C" && !counter) counter = &e;
  }
  REQUIRE(process_names == 3);
  REQUIRE(thread_names == 9);
  REQUIRE(fwd != nullptr);
  CHECK((*fwd)["ts"].get<double>() == Approx(1e5));  // microseconds
  CHECK((*fwd)["pid"] == 0);
  CHECK((*fwd)["tid"] == 0);
  CHECK((*fwd)["args"]["microbatch"] == 0);
  CHECK((*fwd)["args"]["layer"] == 2);
  CHECK_FALSE((*fwd)["args"].contains("peer"));  // absent args are omitted
  CHECK_FALSE((*fwd)["args"].contains("group"));
  REQUIRE(counter != nullptr);
  CHECK((*counter)["name"] == "memory");
  CHECK((*counter)["args"]["parameters"] == 1);
  CHECK((*counter)["args"]["workspace"] == 6);
}

TEST_CASE("chrome trace: a plain Chrome trace loads best-effort") {
  const char* text = R"({"traceEvents": [
    {"ph":"M","name":"process_name","pid":4242,"args":{"name":"python"}},
    {"ph":"X","name":"matmul","pid":4242,"tid":0,"ts":10,"dur":5},
    {"ph":"X","name":"nccl","pid":5000,"tid":1,"ts":12,"dur":2,"cat":"comm"},
    {"ph":"X","name":"other thread","pid":5000,"tid":777,"ts":1,"dur":1},
    {"ph":"i","name":"instant","pid":1,"tid":0,"ts":3}
  ]})";
  const Trace t = parse_chrome_trace(text);
  REQUIRE(t.num_ranks == 2);
  REQUIRE(t.events.size() == 3);
  CHECK(t.events[0].rank == 0);
  CHECK(t.events[0].start == 10e-6);
  CHECK(t.events[1].rank == 1);
  CHECK(t.events[1].lane == Lane::comm);
  CHECK(t.events[2].lane == Lane::compute);
}

TEST_CASE("chrome trace: malformed inputs give one clear TraceFormatError") {
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(read_chrome_trace("/nonexistent/dir/trace.json"),
                        Catch::Contains("does not exist"));
  }
  SECTION("a directory") {
    REQUIRE_THROWS_AS(read_chrome_trace(std::filesystem::temp_directory_path()), TraceFormatError);
  }
  SECTION("empty") {
    CHECK_THAT(error_of(""), Catch::Contains("empty"));
    CHECK_THAT(error_of("  \n"), Catch::Contains("empty"));
  }
  SECTION("truncated") {
    CHECK_THAT(error_of("{"), Catch::Contains("truncated JSON at byte"));
  }
  SECTION("invalid") {
    CHECK_THAT(error_of("{\"traceEvents\": [}"), Catch::Contains("invalid JSON at byte 18 of 18"));
  }
  SECTION("wrong shape") {
    CHECK_THAT(error_of("[1,2,3]"), Catch::Contains("expected a JSON object, got array"));
    CHECK_THAT(error_of("{}"), Catch::Contains("no \"traceEvents\""));
    CHECK_THAT(error_of(R"({"traceEvents": 3})"), Catch::Contains("must be an array"));
    CHECK_THAT(error_of(R"({"traceEvents": [], "mgpu": {"format": "other", "version": 1}})"),
               Catch::Contains("format is \"other\""));
    CHECK_THAT(error_of(R"({"traceEvents": [], "mgpu": {"format": "mgpu-trace", "version": 2,
                         "num_ranks": 1}})"),
               Catch::Contains("unsupported trace version 2"));
  }
  SECTION("X event missing ts") {
    CHECK_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"dur":1}]})"),
               Catch::Contains("traceEvents[0] has no \"ts\""));
  }
  SECTION("X event missing pid") {
    CHECK_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"a","tid":0,"ts":0,"dur":1}]})"),
               Catch::Contains("has no \"pid\""));
  }
  SECTION("wrong field types") {
    CHECK_THAT(
        error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":"0","dur":1}]})"),
        Catch::Contains("traceEvents[0].ts must be a number, got string"));
    CHECK_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":0,"dur":1,
                     "args":{"microbatch":1.5}}]})"),
               Catch::Contains("microbatch must be an integer"));
    CHECK_THAT(
        error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":0,"dur":-1}]})"),
        Catch::Contains("negative"));
    CHECK_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":1,"ts":0,"dur":1,
                     "args":{"counts":[3,-1]}}]})"),
               Catch::Contains("counts[1] must be a count (an integer >= 0), not -1"));
    CHECK_THAT(error_of(R"({"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":1,"ts":0,"dur":1,
                     "args":{"counts":7}}]})"),
               Catch::Contains("counts must be an array"));
  }
  SECTION("mgpu event on a rank that does not exist") {
    Trace t;
    t.num_ranks = 1;
    t.events.push_back(make_event("x", cat::compute, 0, Lane::compute, 0, 1));
    std::string text = to_text(t);
    text.replace(text.find("\"num_ranks\":1"), 13, "\"num_ranks\":0");
    CHECK_THAT(error_of(text), Catch::Contains("is not a rank"));
  }
}

TEST_CASE("chrome trace: truncations of a valid file never crash") {
  const std::string text = to_text(sample_trace());
  // Every byte offset: all must fail cleanly (only the full text, or the text minus its final
  // newline, is a complete document).
  for (size_t len = 0; len + 1 < text.size(); ++len) {
    INFO("truncated to " << len << " bytes");
    REQUIRE_THROWS_AS(parse_chrome_trace(std::string_view(text).substr(0, len)), TraceFormatError);
  }
}

TEST_CASE("chrome trace: deeply nested JSON is rejected without blowing the stack") {
  const std::string deep =
      "{\"traceEvents\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  CHECK_THAT(error_of(deep), Catch::Contains("JSON nested 200001 levels deep"));
  CHECK_THAT(error_of(std::string(200000, '[')), Catch::Contains("nested 200000 levels deep"));
}

TEST_CASE("chrome trace: random garbage never crashes") {
  std::mt19937 rng(2024);
  const std::string valid = to_text(sample_trace());
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    if (trial % 2 == 0) {  // pure noise
      text.resize(rng() % 200);
      for (char& c : text) c = static_cast<char>(rng());
    } else {  // a valid file with a few bytes flipped: often still JSON, but of the wrong shape
      text = valid;
      for (int k = 0; k < 3; ++k) text[rng() % text.size()] = "{}[]\",:0-e.tn \x01"[rng() % 15];
    }
    try {
      parse_chrome_trace(text);
    } catch (const TraceFormatError& e) {
      REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

}  // namespace test_trace

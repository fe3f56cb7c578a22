// Hostile traces (issue #18, item 1): absurd or non-finite timestamps, durations and rank counts
// are one TraceFormatError line naming the event, before the dashboard lays anything out.
#include <catch2/catch.hpp>

#include <string>

#include "core/trace/chrome_trace.h"

namespace test_trace_hostile {

using namespace mgpu::trace;

namespace {

std::string trace_text(const std::string& event, int num_ranks = 2) {
  return R"({"mgpu": {"format": "mgpu-trace", "version": 1, "num_ranks": )" +
         std::to_string(num_ranks) + R"(}, "traceEvents": [)" +
         R"({"ph": "X", "name": "fwd", "cat": "forward", "pid": 0, "tid": 0, "ts": 5, "dur": 2},)" +
         event + "]}";
}

std::string error_of(const std::string& text) {
  try {
    parse_chrome_trace(text, "t.json");
  } catch (const TraceFormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("timestamps beyond 1e12 s, negative or non-finite are refused", "[trace][hostile]") {
  const std::string x = R"({"ph": "X", "name": "b", "cat": "backward", "pid": 1, "tid": 0, )";
  CHECK(error_of(trace_text(x + R"("ts": 1e308, "dur": 1})")) ==
        "t.json: traceEvents[1].ts = 1e+302 s is outside [0, 1e+12] s");
  CHECK_THAT(error_of(trace_text(x + R"("ts": 1.2e29, "dur": 1})")),
             Catch::Contains("traceEvents[1].ts = 1.2e+23 s is outside"));
  CHECK_THAT(error_of(trace_text(x + R"("ts": -3, "dur": 1})")),
             Catch::Contains("traceEvents[1].ts is negative (-3e-06 s)"));
  CHECK_THAT(error_of(trace_text(x + R"("ts": 1, "dur": 1e300})")),
             Catch::Contains("traceEvents[1].dur = 1e+294 s is outside"));
  CHECK_THAT(error_of(trace_text(x + R"("ts": 1, "dur": 1, "ts_s": 1e40})")),
             Catch::Contains("traceEvents[1].ts_s = 1e+40 s is outside"));
  // Counters too.
  CHECK_THAT(
      error_of(trace_text(R"({"ph": "C", "name": "memory", "pid": 0, "tid": 0, "ts": 1e30})")),
      Catch::Contains("traceEvents[1].ts = 1e+24 s is outside"));
}

TEST_CASE("a trace spanning more than 1e7 s is refused, epoch-based timestamps are not",
          "[trace][hostile]") {
  const std::string x = R"({"ph": "X", "name": "b", "cat": "backward", "pid": 1, "tid": 0, )";
  CHECK_THAT(error_of(trace_text(x + R"("ts": 1e14, "dur": 1})")),
             Catch::Contains("events span 1e+08 s") && Catch::Contains("corrupt timestamps?"));
  // A profiler's trace counts from the Unix epoch: large but a short span, so it loads.
  const std::string epoch =
      R"({"traceEvents": [{"ph": "X", "name": "a", "pid": 7, "tid": 0, "ts": 1.7e15, "dur": 3},)"
      R"({"ph": "X", "name": "b", "pid": 9, "tid": 0, "ts": 1.7e15, "dur": 5}]})";
  Trace t = parse_chrome_trace(epoch);
  CHECK(t.num_ranks == 2);
  CHECK(t.events[0].start == Approx(1.7e9));
}

TEST_CASE("absurd rank counts are refused before anything is allocated per rank",
          "[trace][hostile]") {
  CHECK(error_of(
            trace_text("", 1000000000).replace(trace_text("", 1000000000).rfind(",]"), 2, "]")) ==
        "t.json: \"mgpu\".num_ranks 1000000000 out of range (0 to 4096)");
  std::string many = R"({"traceEvents": [)";
  for (int pid = 0; pid < 5000; ++pid)
    many += R"({"ph": "X", "name": "a", "tid": 0, "ts": 1, "dur": 1, "pid": )" +
            std::to_string(pid) + "},";
  many.back() = ']';
  many += "}";
  CHECK(error_of(many) == "t.json: 5000 distinct pids; the dashboard shows at most 4096 ranks");
}

TEST_CASE("a comm event's wait: absent reads as 0, outside 0..dur is refused", "[trace][hostile]") {
  const std::string x = R"({"ph": "X", "name": "recv", "cat": "comm", "pid": 1, "tid": 1, )";
  // Traces written before comm was split into wire and wait have no wait_s: all wire.
  Trace old = parse_chrome_trace(trace_text(x + R"("ts": 1, "dur": 4})"));
  CHECK(old.events.at(1).wait == 0);
  Trace split =
      parse_chrome_trace(trace_text(x + R"("ts": 1, "dur": 4, "args": {"wait_s": 3e-6}})"));
  CHECK(split.events.at(1).wait == 3e-6);
  CHECK(error_of(trace_text(x + R"("ts": 1, "dur": 4, "args": {"wait_s": 5e-6}})")) ==
        "t.json: traceEvents[1].args.wait_s = 5e-06 s is outside 0 to the event's dur (4e-06 s)");
  CHECK_THAT(error_of(trace_text(x + R"("ts": 1, "dur": 4, "args": {"wait_s": -1}})")),
             Catch::Contains("traceEvents[1].args.wait_s = -1 s is outside"));
}

}  // namespace test_trace_hostile

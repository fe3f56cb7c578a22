#include "core/trace/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <ostream>

#include <fmt/format.h>

#include "core/runtime/allocator.h"
#include "core/runtime/input_file.h"
#include "core/runtime/output_file.h"
#include "core/trace/chrome_trace_internal.h"

namespace mgpu::trace {

using nlohmann::json;

namespace {

constexpr double kMicrosPerSecond = 1e6;

double to_micros(double seconds) {
  return seconds * kMicrosPerSecond;
}

}  // namespace

namespace chrome_detail {

double to_seconds(double micros) {
  return micros / kMicrosPerSecond;
}

}  // namespace chrome_detail

using chrome_detail::to_seconds;

namespace {

bool survives_micros(double seconds) {
  return to_seconds(to_micros(seconds)) == seconds;
}

// ---------------------------------------------------------------------------------------------
// Writing

json metadata_event(const char* name, int pid, int tid, json args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

void append_naming_events(int num_ranks, json& events) {
  for (int rank = 0; rank < num_ranks; ++rank) {
    events.push_back(
        metadata_event("process_name", rank, 0, {{"name", fmt::format("GPU {}", rank)}}));
    events.push_back(metadata_event("process_sort_index", rank, 0, {{"sort_index", rank}}));
    for (int lane = 0; lane < kNumLanes; ++lane) {
      events.push_back(metadata_event("thread_name", rank, lane,
                                      {{"name", lane_name(static_cast<Lane>(lane))}}));
      events.push_back(metadata_event("thread_sort_index", rank, lane, {{"sort_index", lane}}));
    }
  }
}

json event_args(const Event& e) {
  json args = json::object();
  if (e.microbatch >= 0) args["microbatch"] = e.microbatch;
  if (e.layer >= 0) args["layer"] = e.layer;
  if (e.chunk >= 0) args["chunk"] = e.chunk;
  if (e.step >= 0) args["step"] = e.step;
  if (e.peer >= 0) args["peer"] = e.peer;
  if (e.bytes != 0) args["bytes"] = e.bytes;
  if (e.sent_bytes != 0) args["sent_bytes"] = e.sent_bytes;
  if (e.wait != 0) args["wait_s"] = e.wait;  // seconds, exact (a double round-trips in JSON)
  if (e.flops != 0) args["flops"] = e.flops;
  if (!e.group.empty()) args["group"] = e.group;
  if (!e.op.empty()) args["op"] = e.op;
  if (e.seq >= 0) args["seq"] = e.seq;
  if (!e.counts.empty()) args["counts"] = e.counts;
  return args;
}

json complete_event(const Event& e) {
  json j = {{"ph", "X"},
            {"name", e.name},
            {"cat", e.cat},
            {"pid", e.rank},
            {"tid", static_cast<int>(e.lane)},
            {"ts", to_micros(e.start)},
            {"dur", to_micros(e.dur)}};
  if (!survives_micros(e.start)) j["ts_s"] = e.start;
  if (!survives_micros(e.dur)) j["dur_s"] = e.dur;
  json args = event_args(e);
  if (!args.empty()) j["args"] = std::move(args);
  return j;
}

json counter_event(const CounterSample& c) {
  json args = json::object();
  for (int i = 0; i < kNumMemCategories; ++i) {
    args[category_name(static_cast<MemCategory>(i))] = c.bytes[i];
  }
  json j = {{"ph", "C"}, {"name", "memory"},        {"pid", c.rank},
            {"tid", 0},  {"ts", to_micros(c.time)}, {"args", std::move(args)}};
  if (!survives_micros(c.time)) j["ts_s"] = c.time;
  return j;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

json to_chrome_json(const Trace& trace) {
  json events = json::array();
  append_naming_events(trace.num_ranks, events);
  for (const Event& e : trace.events) events.push_back(complete_event(e));
  for (const CounterSample& c : trace.counters) events.push_back(counter_event(c));
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"mgpu",
           {{"format", kTraceFormat},
            {"version", kTraceVersion},
            {"num_ranks", trace.num_ranks},
            {"metadata", trace.metadata}}}};
}

void write_chrome_trace(const Trace& trace, std::ostream& out) {
  out << to_chrome_json(trace).dump() << '\n';
}

void write_chrome_trace(const Trace& trace, const std::filesystem::path& path) {
  // Through a temporary file renamed into place (output_file.h): the path is checked again now,
  // when it is written, and an interrupted write leaves no half trace under the real name.
  const std::string text = to_chrome_json(trace).dump() + '\n';
  write_file_atomically(path.string(), "--trace", [&](std::FILE* file) {
    std::fwrite(text.data(), 1, text.size(), file);  // errors: ferror, checked by the helper
  });
}

namespace {

// A trace nests four levels ({"traceEvents": [{"args": {...}}]}); its metadata a few more. Deeper
// input is refused before parsing: copying or printing a 150,000-deep value recurses once per
// level and overflows the stack.
constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted).
int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Trace parse_chrome_trace(std::string_view text, std::string_view source) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    throw TraceFormatError(fmt::format("{}: empty (no JSON at all)", source));
  }
  if (const int depth = json_depth(text); depth > kMaxJsonDepth)
    throw TraceFormatError(fmt::format("{}: JSON nested {} levels deep; a trace nests at most {}",
                                       source, depth, kMaxJsonDepth));
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte is nlohmann's 1-based position of the offending byte; input that simply stops is
    // worth naming as such (a run killed while writing its trace).
    const bool truncated =
        std::string_view(e.what()).find("end of input") != std::string_view::npos;
    throw TraceFormatError(fmt::format("{}: {} JSON at byte {} of {}{}", source,
                                       truncated ? "truncated" : "invalid", e.byte, text.size(),
                                       truncated ? "" : fmt::format(" ({})", e.what())));
  } catch (const json::exception& e) {  // e.g. a number too large for a double (found by fuzzing)
    throw TraceFormatError(fmt::format("{}: invalid JSON ({})", source, e.what()));
  }
  return from_chrome_json(doc, source);
}

Trace read_chrome_trace(const std::filesystem::path& path) {
  std::string text;
  try {  // a regular file of at most kMaxTraceFileBytes (core/runtime/input_file.h)
    text = read_input_file(path.string(), "trace", kMaxTraceFileBytes);
  } catch (const std::invalid_argument& e) {
    throw TraceFormatError(e.what());
  }
  return parse_chrome_trace(text, echo_input(path.string(), 120));
}

}  // namespace mgpu::trace

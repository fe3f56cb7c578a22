#include "core/trace/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <ostream>

#include <fmt/format.h>

#include "core/runtime/input_file.h"
#include "core/runtime/output_file.h"
#include "core/tensor/allocator.h"

namespace mgpu::trace {

using nlohmann::json;

namespace {

constexpr double kMicrosPerSecond = 1e6;

double to_micros(double seconds) {
  return seconds * kMicrosPerSecond;
}
double to_seconds(double micros) {
  return micros / kMicrosPerSecond;
}
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

// ---------------------------------------------------------------------------------------------
// Reading. Every check throws TraceFormatError with "<source>: <where>: <what>".

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw TraceFormatError(fmt::format("{}: {}", source_, what));
  }

  Trace read(const json& doc) {
    if (!doc.is_object()) fail(fmt::format("expected a JSON object, got {}", doc.type_name()));
    auto events = doc.find("traceEvents");
    if (events == doc.end()) fail("no \"traceEvents\" array (not a Chrome trace)");
    if (!events->is_array()) fail("\"traceEvents\" must be an array");

    Trace trace;
    read_header(doc, trace);
    if (!is_mgpu_) assign_generic_ranks(*events);
    for (size_t i = 0; i < events->size(); ++i) read_event((*events)[i], i, trace);
    if (!is_mgpu_) trace.num_ranks = static_cast<int>(rank_of_pid_.size());
    check_span(trace);
    return trace;
  }

 private:
  // Events from 0 to 1e12 s are each fine, but a trace spanning more than kMaxTraceSpan is a
  // corrupt one (the dashboard would lay out days of nanosecond kernels).
  void check_span(const Trace& trace) const {
    double first = kMaxTraceSeconds, last = 0;
    for (const Event& e : trace.events) {
      first = std::min(first, e.start);
      last = std::max(last, e.start + e.dur);
    }
    for (const CounterSample& c : trace.counters) {
      first = std::min(first, c.time);
      last = std::max(last, c.time);
    }
    if (last - first > kMaxTraceSpan)
      fail(
          fmt::format("events span {:.6g} s (from {:.6g} s to {:.6g} s), more than {:.0e} s: "
                      "corrupt timestamps?",
                      last - first, first, last, kMaxTraceSpan));
  }

  void read_header(const json& doc, Trace& trace) {
    auto mgpu = doc.find("mgpu");
    if (mgpu == doc.end()) return;  // a plain Chrome trace
    const std::string where = "\"mgpu\"";
    if (!mgpu->is_object()) fail(where + " must be an object");
    is_mgpu_ = true;
    const std::string format = required_string(*mgpu, "format", where);
    if (format != kTraceFormat)
      fail(fmt::format("{}.format is \"{}\", expected \"{}\"", where, format, kTraceFormat));
    const int64_t version = required_int(*mgpu, "version", where);
    if (version != kTraceVersion) {
      fail(fmt::format("unsupported trace version {} (this build reads version {})", version,
                       kTraceVersion));
    }
    const int64_t num_ranks = required_int(*mgpu, "num_ranks", where);
    if (num_ranks < 0 || num_ranks > kMaxTraceRanks) {
      fail(fmt::format("{}.num_ranks {} out of range (0 to {})", where, num_ranks, kMaxTraceRanks));
    }
    trace.num_ranks = static_cast<int>(num_ranks);
    if (auto meta = mgpu->find("metadata"); meta != mgpu->end()) {
      if (!meta->is_object()) fail(where + ".metadata must be an object");
      trace.metadata = *meta;
    }
  }

  // Plain Chrome traces use OS process ids; number them 0..n-1 in increasing order.
  void assign_generic_ranks(const json& events) {
    for (size_t i = 0; i < events.size(); ++i) {
      const json& e = events[i];
      if (!is_kept_phase(e)) continue;
      rank_of_pid_.emplace(required_int(e, "pid", event_where(i)), 0);
    }
    if (rank_of_pid_.size() > static_cast<size_t>(kMaxTraceRanks))
      fail(fmt::format("{} distinct pids; the dashboard shows at most {} ranks",
                       rank_of_pid_.size(), kMaxTraceRanks));
    int next = 0;
    for (auto& [pid, rank] : rank_of_pid_) rank = next++;
  }

  bool is_kept_phase(const json& e) const {
    if (!e.is_object()) return false;
    auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) return false;
    const auto& phase = ph->get_ref<const std::string&>();
    return phase == "X" || (phase == "C" && e.value("name", json()) == "memory");
  }

  static std::string event_where(size_t index) { return fmt::format("traceEvents[{}]", index); }

  void read_event(const json& e, size_t index, Trace& trace) {
    const std::string where = event_where(index);
    if (!e.is_object()) fail(fmt::format("{} must be an object, got {}", where, e.type_name()));
    const std::string phase = required_string(e, "ph", where);
    if (phase == "X") {
      trace.events.push_back(read_complete_event(e, where, trace.num_ranks));
    } else if (phase == "C" && optional_string(e, "name", where) == "memory") {
      trace.counters.push_back(read_counter(e, where, trace.num_ranks));
    }
    // Metadata ("M"), other counters and phases mgpu does not produce are skipped.
  }

  Event read_complete_event(const json& j, const std::string& where, int num_ranks) {
    Event e;
    e.name = required_string(j, "name", where);
    e.cat = optional_string(j, "cat", where);
    e.rank = read_rank(j, where, num_ranks);
    e.lane = read_lane(j, where);
    e.start = read_seconds(j, "ts", "ts_s", where);
    e.dur = read_seconds(j, "dur", "dur_s", where);
    if (e.dur < 0) fail(fmt::format("{}.dur is negative ({})", where, e.dur));

    if (auto args = j.find("args"); args != j.end()) read_args(*args, where + ".args", e);
    return e;
  }

  void read_args(const json& args, const std::string& where, Event& e) {
    if (!args.is_object()) fail(where + " must be an object");
    e.microbatch = optional_int32(args, "microbatch", where, -1);
    e.layer = optional_int32(args, "layer", where, -1);
    e.chunk = optional_int32(args, "chunk", where, -1);
    e.step = optional_int32(args, "step", where, -1);
    e.peer = optional_int32(args, "peer", where, -1);
    e.bytes = optional_int(args, "bytes", where, 0);
    e.sent_bytes = optional_int(args, "sent_bytes", where, 0);
    e.wait = optional_number(args, "wait_s", where, 0);  // absent in traces before the split
    if (!(e.wait >= 0 && e.wait <= e.dur))
      fail(fmt::format("{}.wait_s = {} s is outside 0 to the event's dur ({} s)", where, e.wait,
                       e.dur));
    e.flops = optional_number(args, "flops", where, 0);
    e.group = optional_string(args, "group", where);
    e.op = optional_string(args, "op", where);
    e.seq = optional_int(args, "seq", where, -1);
    if (auto counts = args.find("counts"); counts != args.end()) read_counts(*counts, where, e);
  }

  void read_counts(const json& counts, const std::string& where, Event& e) {
    if (!counts.is_array()) fail(where + ".counts must be an array of counts");
    for (size_t i = 0; i < counts.size(); ++i) {
      const json& c = counts[i];
      if (!c.is_number_integer() || c.get<int64_t>() < 0)
        fail(fmt::format("{}.counts[{}] must be a count (an integer >= 0), not {}", where, i,
                         c.dump()));
      e.counts.push_back(c.get<int64_t>());
    }
  }

  CounterSample read_counter(const json& j, const std::string& where, int num_ranks) {
    CounterSample c;
    c.rank = read_rank(j, where, num_ranks);
    c.time = read_seconds(j, "ts", "ts_s", where);
    auto args = j.find("args");
    if (args == j.end()) return c;
    if (!args->is_object()) fail(where + ".args must be an object");
    // Bytes held are never negative (a negative one hid the memory panel), and at most 2^52
    // (4 PiB) each, so the sum over the categories cannot overflow (two INT64_MAX summed did).
    constexpr int64_t kMaxCounterBytes = int64_t{1} << 52;
    for (int i = 0; i < kNumMemCategories; ++i) {
      const char* name = category_name(static_cast<MemCategory>(i));
      c.bytes[i] = optional_int(*args, name, where + ".args", 0);
      if (c.bytes[i] < 0 || c.bytes[i] > kMaxCounterBytes)
        fail(fmt::format("{}.args.{} = {} bytes is outside 0 to 2^52 (4 PiB)", where, name,
                         c.bytes[i]));
    }
    return c;
  }

  int read_rank(const json& j, const std::string& where, int num_ranks) {
    const int64_t pid = required_int(j, "pid", where);
    if (!is_mgpu_) return rank_of_pid_.at(pid);
    if (pid < 0 || pid >= num_ranks) {
      fail(fmt::format("{}.pid {} is not a rank (num_ranks = {})", where, pid, num_ranks));
    }
    return static_cast<int>(pid);
  }

  Lane read_lane(const json& j, const std::string& where) {
    const int64_t tid = required_int(j, "tid", where);
    if (tid >= 0 && tid < kNumLanes) return static_cast<Lane>(tid);
    if (is_mgpu_)
      fail(fmt::format("{}.tid {} is not a lane (0 compute, 1 comm, 2 step)", where, tid));
    return Lane::compute;
  }

  // Microseconds in `us_key`, unless the writer stored the exact seconds in `exact_key`.
  double read_seconds(const json& j, const char* us_key, const char* exact_key,
                      const std::string& where) {
    const double micros = required_number(j, us_key, where);
    double seconds = to_seconds(micros);
    const char* key = us_key;
    if (auto exact = j.find(exact_key); exact != j.end()) {
      if (!exact->is_number()) fail(fmt::format("{}.{} must be a number", where, exact_key));
      seconds = exact->get<double>();
      key = exact_key;
    }
    // Finite and within [0, kMaxTraceSeconds]; the value is shown short (%.6g).
    if (seconds < 0) fail(fmt::format("{}.{} is negative ({:.6g} s)", where, key, seconds));
    if (!std::isfinite(seconds) || seconds > kMaxTraceSeconds)
      fail(fmt::format("{}.{} = {:.6g} s is outside [0, {:.0e}] s", where, key, seconds,
                       kMaxTraceSeconds));
    return seconds;
  }

  // Field accessors: `where` names the enclosing object for the message.
  const json& required(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(fmt::format("{} has no \"{}\"", where, key));
    return *it;
  }

  std::string required_string(const json& obj, const char* key, const std::string& where) {
    const json& v = required(obj, key, where);
    if (!v.is_string()) fail(type_error(where, key, "a string", v));
    return v.get<std::string>();
  }

  std::string optional_string(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end()) return {};
    if (!it->is_string()) fail(type_error(where, key, "a string", *it));
    return it->get<std::string>();
  }

  double required_number(const json& obj, const char* key, const std::string& where) {
    const json& v = required(obj, key, where);
    if (!v.is_number()) fail(type_error(where, key, "a number", v));
    return v.get<double>();
  }

  double optional_number(const json& obj, const char* key, const std::string& where,
                         double absent) {
    auto it = obj.find(key);
    if (it == obj.end()) return absent;
    if (!it->is_number()) fail(type_error(where, key, "a number", *it));
    return it->get<double>();
  }

  int64_t as_int(const json& v, const char* key, const std::string& where) {
    if (!v.is_number_integer()) fail(type_error(where, key, "an integer", v));
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(fmt::format("{}.{} is too large", where, key));
    }
    return v.get<int64_t>();
  }

  int64_t required_int(const json& obj, const char* key, const std::string& where) {
    return as_int(required(obj, key, where), key, where);
  }

  int64_t optional_int(const json& obj, const char* key, const std::string& where, int64_t absent) {
    auto it = obj.find(key);
    return it == obj.end() ? absent : as_int(*it, key, where);
  }

  int optional_int32(const json& obj, const char* key, const std::string& where, int absent) {
    const int64_t v = optional_int(obj, key, where, absent);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      fail(fmt::format("{}.{} = {} does not fit an int", where, key, v));
    }
    return static_cast<int>(v);
  }

  static std::string type_error(const std::string& where, const char* key, const char* expected,
                                const json& got) {
    return fmt::format("{}.{} must be {}, got {}", where, key, expected, got.type_name());
  }

  std::string source_;
  bool is_mgpu_ = false;
  std::map<int64_t, int> rank_of_pid_;  // plain Chrome traces only
};

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

Trace from_chrome_json(const json& doc, std::string_view source) {
  return Reader(source).read(doc);
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

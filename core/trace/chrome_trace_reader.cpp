// Reading Chrome Trace Event JSON into a Trace (mgpu's own traces and plain Chrome traces, as
// chrome_trace.h describes). Every check throws TraceFormatError with "<source>: <where>: <what>".
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>

#include "core/runtime/allocator.h"
#include "core/trace/chrome_trace.h"
#include "core/trace/chrome_trace_fields.h"
#include "core/trace/chrome_trace_internal.h"

namespace mgpu::trace {

using chrome_detail::to_seconds;
using nlohmann::json;

namespace {

class Reader : public chrome_detail::FieldReader {
 public:
  explicit Reader(std::string_view source) : FieldReader(source) {}

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

  bool is_mgpu_ = false;
  std::map<int64_t, int> rank_of_pid_;  // plain Chrome traces only
};

}  // namespace

Trace from_chrome_json(const json& doc, std::string_view source) {
  return Reader(source).read(doc);
}

}  // namespace mgpu::trace

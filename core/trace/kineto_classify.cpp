// The Kineto reader's mapping of one finished trace event (see kineto_reader.h for the table).
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <regex>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <rapidjson/encodings.h>
#include <rapidjson/memorystream.h>

#include "core/trace/kineto_event.h"

namespace mgpu::trace::kineto {

using namespace std::string_view_literals;

namespace {

// Kineto timestamps are microseconds, often since the Unix epoch.
constexpr double kMaxMicros = kMaxTraceSeconds * 1e6;
constexpr double kMaxDurMicros = kMaxTraceSpan * 1e6;

// Equal strings: the length first, then the bytes, inlined (a call per field per event was a
// twentieth of the reader's time).
inline bool same(std::string_view key, std::string_view word) {
  return key.size() == word.size() && std::memcmp(key.data(), word.data(), word.size()) == 0;
}

// RapidJSON's UTF-8 validation, over one string.
bool valid_utf8(std::string_view s) {
  struct Discard {
    void Put(char) {}
  } out;
  rapidjson::MemoryStream in(s.data(), s.size());
  while (in.Tell() < s.size())
    if (!rapidjson::UTF8<>::Validate(in, out)) return false;
  return true;
}

// `s` in lower case, into `out` (whose capacity a caller may reuse).
void lower_into(std::string_view s, std::string& out) {
  out.assign(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

std::string lower(std::string_view s) {
  std::string out;
  lower_into(s, out);
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

const char* kind_name(Scalar::Kind k) {
  return k == Scalar::Kind::number ? "a number"
         : k == Scalar::Kind::text ? "a string"
                                   : "null or a boolean";
}

void require_text(const Scalar& v, const char* field, const EventRecord& e, const RawRank& file,
                  std::string& into) {
  if (v.kind != Scalar::Kind::text)
    fail_event(file, e, field, fmt::format("must be a string, got {}", kind_name(v.kind)));
  into.assign(v.text);
}

double require_micros(const Scalar& v, const char* field, const EventRecord& e,
                      const RawRank& file) {
  if (v.kind != Scalar::Kind::number)
    fail_event(file, e, field,
               fmt::format("must be a number of microseconds, got {}", kind_name(v.kind)));
  return v.number;
}

std::string id_text(const Scalar& v) {
  if (v.kind == Scalar::Kind::text) return std::string(v.text);
  if (v.kind == Scalar::Kind::number) return v.integer >= 0 ? std::to_string(v.integer) : "?";
  return "";
}

// UTF-8 is checked here, once per distinct string the reader keeps, not on every byte of the
// file: names reach the dashboard and `mgpu analyze --json`.
uint32_t intern(std::string_view s, std::vector<std::string>& table, NameIndex& index,
                const EventRecord& e, const RawRank& file, const char* field) {
  if (const auto it = index.find(s); it != index.end()) return it->second;
  if (!valid_utf8(s)) fail_event(file, e, field, "is not valid UTF-8");
  const auto id = static_cast<uint32_t>(table.size());
  index.emplace(s, id);
  table.emplace_back(s);
  return id;
}

uint32_t intern_name(std::string_view s, RawRank& file, const EventRecord& e, const char* field) {
  return intern(s, file.names, file.name_index, e, file, field);
}

void check_times(const EventRecord& e, const RawRank& file, bool needs_dur) {
  if (!e.has_ts) fail_event(file, e, "ts", "missing (every timed event needs ts, microseconds)");
  if (!(std::fabs(e.ts) <= kMaxMicros))
    fail_event(file, e, "ts", fmt::format("{} is outside +-{:g} us", e.ts, kMaxMicros));
  if (!needs_dur) return;
  if (!e.has_dur) fail_event(file, e, "dur", "missing (a complete \"X\" event needs dur)");
  if (!(e.dur >= 0 && e.dur <= kMaxDurMicros))
    fail_event(file, e, "dur", fmt::format("{} is outside 0..{:g} us", e.dur, kMaxDurMicros));
}

void keep_gpu_op(const EventRecord& e, GpuOp::Kind kind, RawRank& file) {
  GpuOp g;
  g.kind = kind;
  g.name = intern_name(e.name, file, e, "name");
  g.ts = e.ts;
  g.dur = e.dur;
  g.correlation = e.correlation;
  if (kind == GpuOp::Kind::comm) {
    g.op =
        intern_name(collective_op(e.collective.empty() ? e.name : e.collective), file, e, "name");
    if (e.in_nelems > 0) g.bytes = e.in_nelems * dtype_bytes(e.dtype);
    g.group = intern_name(e.group, file, e, "args.Process Group Name");
  }  // else op and group stay 0: RawRank::names[0] is ""
  file.gpu.push_back(g);
}

void keep_cpu_op(const EventRecord& e, RawRank& file) {
  thread_local std::string key;  // "pid/tid", built without a fresh allocation per op
  key.assign(e.pid).append("/").append(e.tid);
  const uint32_t thread = intern(key, file.threads, file.thread_index, e, file, "pid/tid");
  if (starts_with(e.name, "nccl:") || starts_with(e.name, "gloo:") ||
      e.name == "record_param_comms") {
    intern_name(e.name, file, e, "name");  // checks its UTF-8
    intern_name(e.group, file, e, "args.Process Group Name");
    CommSpan c{thread, e.ts, e.dur, e.name, "", e.group, 0, e.name == "record_param_comms"};
    c.op = collective_op(e.collective.empty() ? e.name.substr(std::min<size_t>(5, e.name.size()))
                                              : e.collective);
    if (e.in_nelems > 0) c.bytes = e.in_nelems * dtype_bytes(e.dtype);
    file.comm.push_back(std::move(c));
    return;
  }
  file.cpu.push_back({thread, intern_name(e.name, file, e, "name"), e.ts, e.dur});
}

bool keep_step(const EventRecord& e, RawRank& file) {
  constexpr std::string_view prefix = "ProfilerStep#";
  if (!starts_with(e.name, prefix)) return false;
  int step = -1;
  const char* first = e.name.data() + prefix.size();
  const char* last = e.name.data() + e.name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || step < 0)
    fail_event(file, e, "name",
               fmt::format("'{}' is not ProfilerStep#<step number>", e.name.substr(0, 60)));
  file.steps.push_back({step, e.ts, e.ts + e.dur});
  return true;
}

// A pipeline schedule's annotation: a forward or backward of a numbered micro-batch, e.g.
// "forward mb3", "bwd_microbatch_12", "Stage 1 Forward (micro-batch 0)".
bool names_microbatch(const std::string& name) {
  static const std::regex pattern(
      R"((fwd|forward|bwd|backward).*(mb|micro[-_ ]?batch)[-_ #]?\(?\d+|(mb|micro[-_ ]?batch)[-_ #]?\d+.*(fwd|forward|bwd|backward))",
      std::regex::icase | std::regex::optimize);
  return std::regex_search(name, pattern);
}

}  // namespace

std::string kineto_limits_note() {
  return fmt::format(
      "(Kineto reader limits: {} events and {} GiB of JSON per file, {} levels of nesting, {} "
      "ranks)",
      kMaxKinetoEvents, kMaxKinetoFileBytes >> 30, kMaxKinetoDepth, kMaxTraceRanks);
}

void fail_event(const RawRank& file, const EventRecord& e, const char* field,
                const std::string& what) {
  throw TraceFormatError(fmt::format("{}: traceEvents[{}].{} {} {}", file.source, e.index, field,
                                     what, kineto_limits_note()));
}

void read_event_field(std::string_view key, const Scalar& v, EventRecord& e, const RawRank& file) {
  if (same(key, "ph"))
    require_text(v, "ph", e, file, e.ph);
  else if (same(key, "cat"))
    require_text(v, "cat", e, file, e.cat);
  else if (same(key, "name"))
    require_text(v, "name", e, file, e.name);
  else if (same(key, "pid"))
    e.pid = id_text(v);
  else if (same(key, "tid"))
    e.tid = id_text(v);
  else if (same(key, "ts"))
    e.ts = require_micros(v, "ts", e, file), e.has_ts = true;
  else if (same(key, "dur"))
    e.dur = require_micros(v, "dur", e, file), e.has_dur = true;
}

void read_event_arg(std::string_view key, const Scalar& v, EventRecord& e) {
  if (v.kind == Scalar::Kind::number) {
    if (same(key, "correlation"))
      e.correlation = v.integer;
    else if (same(key, "In msg nelems"))
      e.in_nelems = v.integer;
    else if (same(key, "Total Allocated"))
      e.total_allocated = v.integer;
    else if (same(key, "Device Type"))
      e.device_type = v.integer;
  } else if (v.kind == Scalar::Kind::text) {
    if (same(key, "dtype"))
      e.dtype.assign(v.text);
    else if (same(key, "Collective name"))
      e.collective.assign(v.text);
    else if (same(key, "Process Group Name"))
      e.group.assign(v.text);
  }
}

void classify_event(const EventRecord& e, RawRank& file) {
  if ((e.ph == "i"sv || e.ph == "I"sv) && e.name == "[memory]"sv) {
    check_times(e, file, false);
    if (e.total_allocated >= 0)
      file.memory.push_back({e.ts, e.total_allocated, e.device_type == 1});
    file.earliest = std::min(file.earliest, e.ts);
    return;
  }
  if (e.ph != "X"sv) return;  // metadata, flows, counters: nothing the analysis uses
  check_times(e, file, true);
  file.earliest = std::min(file.earliest, e.ts);
  thread_local std::string cat;  // lower case, without an allocation per event
  lower_into(e.cat, cat);
  if (cat == "kernel"sv) {
    keep_gpu_op(e, starts_with(e.name, "nccl") ? GpuOp::Kind::comm : GpuOp::Kind::compute, file);
  } else if (cat == "gpu_memcpy"sv || cat == "gpu_memset"sv || cat == "memcpy"sv ||
             cat == "memset"sv) {
    keep_gpu_op(e, GpuOp::Kind::memory, file);
  } else if (cat == "cuda_runtime"sv || cat == "cuda_driver"sv || cat == "runtime"sv ||
             cat == "driver"sv) {
    ++file.host.calls;
    file.host.seconds += e.dur * 1e-6;
    if (e.correlation >= 0) file.launch_end[e.correlation] = e.ts + e.dur;
  } else if (cat == "cpu_op"sv || cat == "user_annotation"sv || cat.empty()) {  // no cat: legacy
    if (keep_step(e, file)) return;
    if (cat == "user_annotation"sv && names_microbatch(e.name)) ++file.microbatch_annotations;
    keep_cpu_op(e, file);
  }
}

std::string collective_op(std::string_view text) {
  std::string key;
  for (char c : text)
    if (std::isalnum(static_cast<unsigned char>(c)))
      key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view prefix : {"nccldevkernel", "ncclkernel"})
    if (starts_with(key, prefix)) key.erase(0, prefix.size());
  static constexpr std::array<std::pair<const char*, const char*>, 10> kinds{
      {{"allreduce", "all_reduce"},
       {"reducescatter", "reduce_scatter"},
       {"allgather", "all_gather"},
       {"alltoall", "all_to_all"},
       {"broadcast", "broadcast"},
       {"sendrecv", "send"},
       {"send", "send"},
       {"recv", "recv"},
       {"reduce", "reduce"},
       {"barrier", "barrier"}}};
  size_t best = std::string::npos;
  const char* found = "";
  for (const auto& [token, name] : kinds) {  // the earliest token wins: "AllReduce_..._Sum"
    const size_t at = key.find(token);
    if (at < best) best = at, found = name;
  }
  return found;
}

int dtype_bytes(std::string_view dtype) {
  std::string d = lower(dtype);
  if (starts_with(d, "c10::")) d.erase(0, 5);
  if (d == "double" || d == "float64" || d == "long" || d == "int64" || d == "complexfloat")
    return 8;
  if (d == "float" || d == "float32" || d == "int" || d == "int32") return 4;
  if (d == "half" || d == "float16" || d == "bfloat16" || d == "short" || d == "int16") return 2;
  if (d == "byte" || d == "char" || d == "bool" || d == "uint8" || d == "int8") return 1;
  return 0;
}

}  // namespace mgpu::trace::kineto

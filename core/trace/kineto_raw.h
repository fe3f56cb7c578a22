// Internal to the Kineto reader: what one file holds, as parsed, before ranks are numbered and
// clocks aligned. Times are the file's microseconds (its "ts"), unshifted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/runtime/trace_event.h"
#include "core/trace/kineto_reader.h"

namespace mgpu::trace::kineto {

struct StepRange {
  int step = 0;
  double ts = 0, end = 0;
};

// A CPU op (or record function) on one thread; `thread` and `name` index RawRank's tables.
struct CpuSpan {
  uint32_t thread = 0;
  uint32_t name = 0;
  double ts = 0, dur = 0;
};

// A "gloo:*" / "nccl:*" record function or a "record_param_comms" op: communication on the CPU
// side, with what its args say about the collective.
struct CommSpan {
  uint32_t thread = 0;
  double ts = 0, dur = 0;
  std::string name, op, group;
  int64_t bytes = 0;
  bool params_only = false;  // record_param_comms: carries args, is not itself the range
};

// A GPU kernel, memcpy or memset, compactly: a big trace has a million of them, most sharing a
// few names, so names are indices into RawRank::names (each name held once) until assembly.
struct GpuOp {
  enum class Kind : uint8_t { compute, comm, memory };
  Kind kind = Kind::compute;
  uint32_t name = 0, op = 0, group = 0;  // RawRank::names; op and group 0 ("") unless comm
  double ts = 0, dur = 0;
  int64_t bytes = 0;
  int64_t correlation = -1;  // -1 when none
};

// Name -> its index, looked up by string_view (no key built per event).
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using NameIndex = std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>>;

struct MemorySample {
  double ts = 0;
  int64_t bytes = 0;
  bool gpu = false;
};

struct RawRank {
  std::string source;
  int rank = -1;
  int world_size = -1;
  double earliest = std::numeric_limits<double>::infinity();  // of every timed event
  std::vector<GpuOp> gpu;                                     // ts/dur in microseconds, unshifted
  std::unordered_map<int64_t, double> launch_end;  // correlation -> end of the runtime call
  HostActivity host;
  std::vector<StepRange> steps;
  std::vector<CpuSpan> cpu;
  std::vector<CommSpan> comm;
  // CpuSpan::name, GpuOp::name/op/group (each valid UTF-8); names[0] is "".
  std::vector<std::string> names{""};
  std::vector<std::string> threads;             // CpuSpan::thread ("pid/tid")
  NameIndex name_index{{"", 0}}, thread_index;  // while parsing
  std::vector<MemorySample> memory;
  int64_t events = 0;
  int64_t microbatch_annotations = 0;  // user annotations naming a micro-batch's pass
};

// Parse one file's JSON; TraceFormatError ("<source>: traceEvents[i].field: ...") on bad input.
// `read` fills its buffer with the file's next bytes and returns how many (0 at the end).
// `prefetch`: call it on a second thread, a chunk ahead of the parser.
using ReadChunk = std::function<size_t(char* buffer, size_t size)>;
RawRank parse_raw_chunks(const ReadChunk& read, const std::string& source, bool prefetch);
RawRank parse_raw_text(std::string_view text, const std::string& source);

// "AllReduce", "allreduce", "all_reduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL" ->
// "all_reduce" (the project's collective names); "" when none is recognised.
std::string collective_op(std::string_view text);
// Bytes per element of a torch dtype name ("Float", "c10::Half", "BFloat16", ...); 0 unknown.
int dtype_bytes(std::string_view dtype);

}  // namespace mgpu::trace::kineto

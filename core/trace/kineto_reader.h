// Reads PyTorch profiler (Kineto) traces, the Chrome JSON that torch.profiler's
// export_chrome_trace / tensorboard_trace_handler write, one file per rank, into the project's own
// Trace, so the dashboard and core/trace/analysis work on a real job as on a lesson's run.
//
// What becomes what (one rank per file; `cat` compared without case):
// - GPU kernels (cat "kernel"), every stream merged: the rank's compute lane, cat "compute".
//   NCCL kernels (name starting "nccl", e.g. ncclKernel_*, ncclDevKernel_*): the comm lane, cat
//   "comm", op = the collective ("all_reduce", ...) from the "Collective name" arg or the kernel
//   name, bytes = "In msg nelems" x size of "dtype" when the args carry them, group = "Process
//   Group Name".
// - cat "gpu_memcpy" / "gpu_memset": the compute lane, cat "memory" (trace::cat::memory).
// - cat "cuda_runtime" / "cuda_driver" (the CPU side): not drawn; each call's end, matched by
//   args.correlation, is the launch time of the GPU operation it enqueued
//   (KinetoTrace::launch_end), which idle-by-cause analysis uses; their count and time are in
//   KinetoTrace::host.
// - "ProfilerStep#N" (a CPU user annotation): the step lane, step N, from its start to the later
//   of its end and the end of the last GPU operation launched inside it.
// - "[memory]" instant events: memory counters, "Total Allocated" in the workspace category (a
//   trace records the allocator's total only); GPU samples when any, else the CPU's.
// - A trace with no GPU activity (a CPU job, e.g. gloo): the CPU ops that no other op on their
//   thread contains are the compute lane, and the "gloo:*" / "nccl:*" record functions the comm
//   lane (ops inside a record function are part of it, not compute).
// Rank and world size come from "distributedInfo"; files without it take ranks 0..n-1 in the
// order given. Ranks' clocks are aligned by each rank's first ProfilerStep start (default; a
// multi-node job's clocks differ) or kept as recorded (Align::clock). Times become seconds from
// the earliest event of any rank.
//
// Parsing streams (RapidJSON's SAX reader): memory grows with the GPU operations kept, not with
// the file. Limits, stated in every error: see kMaxKineto*.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/trace_event.h"
#include "core/trace/chrome_trace.h"

namespace mgpu::trace {

inline constexpr int64_t kMaxKinetoFileBytes = int64_t{8} << 30;  // JSON bytes, after gunzip
inline constexpr int64_t kMaxKinetoEvents = 50'000'000;           // traceEvents per file
inline constexpr int kMaxKinetoFiles = kMaxTraceRanks;
inline constexpr int kMaxKinetoDepth = 64;  // JSON nesting (Kineto writes 4-6 levels)

struct KinetoOptions {
  enum class Align { first_step, clock };
  Align align = Align::first_step;
};

struct HostActivity {  // one rank's CUDA runtime/driver calls
  int64_t calls = 0;
  double seconds = 0;  // sum of their durations
};

struct KinetoTrace {
  Trace trace;  // metadata: source "kineto", files, align, world_size, steps
  // Per trace.events index: when the host call that enqueued the operation returned (seconds,
  // the trace's clock); negative when unknown (no matching runtime call, or not a GPU event).
  std::vector<double> launch_end;
  std::vector<HostActivity> host;  // per rank
};

// True when the file reads as a PyTorch profiler trace: a folder, a .gz file, a bare JSON array
// of events (what PyTorch builds without Kineto write), or a file whose first 64 KiB hold a key
// only Kineto writes ("schemaVersion", "distributedInfo", "deviceProperties", "traceName").
bool is_kineto_file(const std::filesystem::path& path);

// A folder's *.json and *.json.gz files (sorted), or the file itself. TraceFormatError when the
// folder holds none.
std::vector<std::filesystem::path> kineto_files_in(const std::filesystem::path& path);

// One file per rank (plain or gzip). Throws TraceFormatError with one line naming the file, the
// event index and field, and the limits.
KinetoTrace read_kineto_traces(const std::vector<std::filesystem::path>& files,
                               const KinetoOptions& options = {});

// In-memory texts, one per rank (tests, the fuzz target); `sources` name them in errors.
KinetoTrace parse_kineto_traces(const std::vector<std::string_view>& texts,
                                const std::vector<std::string>& sources,
                                const KinetoOptions& options = {});

}  // namespace mgpu::trace

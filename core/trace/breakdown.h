// What `mgpu analyze` reports, per rank and step, built on analysis.h's RankSummary (the lessons'
// per-rank table) so every shared figure has one source. docs/real-traces.md is the glossary.
//
// With C the rank's compute-lane events other than memory operations, M its memory operations
// (cat "memory", also on the compute lane), K its comm-lane events, |X| the length of the union
// of X clipped to the window, and busy, idle, exposed_comm, overlap as in analysis.h:
// - compute        = |C|
// - exposed_memory = |M \ C|                 = busy - compute
// - exposed_comm   = |K \ (C u M)|           = RankSummary::exposed_comm
// - device_idle    = span - |C u M u K|      = RankSummary::idle - exposed_comm
//   so compute + exposed_memory + exposed_comm + device_idle = span (the step time).
// - device_idle by cause: each gap of C u M u K in the window is charged whole to one cause, by
//   the operation that ends it (the one launched first among those starting at the gap's end)
//   and L, when the host call that launched it returned (KinetoTrace::launch_end):
//     host:   L >= the gap's start (the GPU had nothing queued: it waited for the host);
//     kernel: L <  the gap's start (the operation was queued already: it waited on another
//             kernel or event before it, e.g. a stream dependency or the launch latency);
//     other:  the gap runs to the window's end, or its operation's launch is unknown (every gap
//             of a trace without launch times, such as the project's own).
// - straggler of a step: the rank with the most work (busy = compute + exposed_memory; the
//   others wait for it in communication), ahead of the rank with the least by `straggler_lead`.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/trace/analysis.h"

namespace mgpu::trace {

struct IdleByCause {
  double host = 0;
  double kernel = 0;
  double other = 0;
};

struct RankBreakdown {
  int rank = 0;
  double compute = 0;
  double exposed_memory = 0;
  double exposed_comm = 0;
  double device_idle = 0;
  IdleByCause idle_by_cause;
  RankSummary summary;  // analysis.h's figures for the same window
};

struct StepBreakdown {
  std::optional<int> step;  // none: the whole trace
  Interval window;
  std::vector<RankBreakdown> ranks;
  int straggler = -1;         // -1 with fewer than two ranks
  double straggler_lead = 0;  // seconds of work beyond the least-loaded rank
};

// The step numbers on the trace's step lane, ascending.
std::vector<int> trace_steps(const Trace& trace);

// `launch_end`: per trace.events index (see KinetoTrace), or empty when the trace has none.
StepBreakdown breakdown(const Trace& trace, std::optional<int> step,
                        const std::vector<double>& launch_end = {});

// Every step's breakdown, ascending (the whole trace's when it has no steps): the same figures as
// breakdown() per step, in one pass over the events rather than one per step.
std::vector<StepBreakdown> breakdown_steps(const Trace& trace,
                                           const std::vector<double>& launch_end = {});

struct KernelTime {
  std::string category;  // "compute", "memory" or "comm"
  std::string name;
  double seconds = 0;  // sum of the operations' durations clipped to the window
  int64_t count = 0;
};
// The `per_category` longest operation names of each category on `rank` in the window, longest
// first (ties by name).
std::vector<KernelTime> top_kernels(const Trace& trace, int rank, Interval window,
                                    size_t per_category);
// The same for every rank of the trace at once (one pass over the events, not one per rank).
std::vector<std::vector<KernelTime>> top_kernels_by_rank(const Trace& trace, Interval window,
                                                         size_t per_category);

}  // namespace mgpu::trace

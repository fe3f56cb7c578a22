// The numbers lessons print, tests assert and the dashboard shows, computed from a Trace.
//
// Definitions (all times in seconds, all within one window [t0, t1]):
// - window: the given step's [earliest start, latest end] over the step-lane events of every rank
//   with that step number, or without a step the whole trace (earliest start to latest end of
//   any event on any rank). span = t1 - t0, the same for every rank so ranks compare directly.
// - busy: length of the union of the rank's compute-lane events clipped to the window (two
//   overlapping kernels count once). idle = span - busy; bubble_fraction = idle / span.
// - comm: length of the union of the rank's comm-lane events in the window, split into
//   comm_wire: the union of the events' parts that move bytes ([start + wait, end]: an event's
//   waiting is counted from its start, wherever in a collective it fell), and
//   comm_wait = comm - comm_wire: time the lane only waits for a partner that has not sent yet.
// - overlap: time when the compute and comm lanes are both active; overlap_fraction =
//   overlap / comm (0 without comm), the share of communication hidden behind compute;
//   exposed_comm = comm - overlap.
// - bytes_sent: sum of `bytes` over the rank's comm-lane events that start in the window, except
//   op "recv" (a point-to-point transfer counts once, at its sender). This is the size of the
//   buffers handed to communication, not what crossed the wire.
// - wire_bytes: sum of `sent_bytes` over the same events: the bytes the rank's send paths
//   actually put on the wire (measured: a ring all-reduce of S bytes gives 2(N-1)/N x S).
// - peak_memory: per-category and total high-water marks of the rank's memory counters in the
//   window (the sample in force at t0 included); category peaks need not coincide in time.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::trace {

// ---- Interval arithmetic (exact: sort + merge, no sampling) ----
struct Interval {
  double begin = 0;
  double end = 0;
  double length() const { return end - begin; }
  bool operator==(const Interval&) const = default;
};
// Sorted, disjoint, non-empty intervals covering the same points as `intervals`.
std::vector<Interval> merge_intervals(std::vector<Interval> intervals);
double total_length(const std::vector<Interval>& merged);
// Both inputs merged; the result is merged.
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b);
// The union of intervals added one at a time, in any order, without keeping them: clipped(w) is
// merge_intervals of the added intervals each clipped to w (touching ones merge, empty ones drop),
// so a stream of events gives lane_intervals' figures bit for bit from a few spans.
class IntervalUnion {
 public:
  void add(Interval i);
  std::vector<Interval> clipped(Interval window) const;
  size_t spans() const { return spans_.size(); }

 private:
  std::map<double, double> spans_;  // begin -> end, disjoint and not touching
};

// The intervals of `rank` on `lane`, clipped to `window`, merged.
std::vector<Interval> lane_intervals(const Trace& trace, int rank, Lane lane, Interval window);
// The parts of the rank's comm-lane events that move bytes, [start + wait, end], clipped, merged.
std::vector<Interval> comm_wire_intervals(const Trace& trace, int rank, Interval window);

// ---- Memory ----
struct MemoryPeak {
  std::array<int64_t, 6> by_category{};  // indexed by MemCategory
  int64_t total = 0;                     // high-water mark of the sum over categories
  bool operator==(const MemoryPeak&) const = default;
};

struct MemoryTimeline {
  std::vector<CounterSample> samples;  // this rank's samples, sorted by time (stable)
  MemoryPeak peak;
};
MemoryTimeline memory_timeline(const Trace& trace, int rank);

// ---- Per-rank and whole-run summaries ----
struct RankSummary {
  int rank = 0;
  double span = 0;
  double busy = 0;
  double comm = 0;       // = comm_wire + comm_wait
  double comm_wire = 0;  // bytes moving
  double comm_wait = 0;  // waiting for a partner
  double idle = 0;
  double bubble_fraction = 0;
  double overlap = 0;
  double overlap_fraction = 0;
  double exposed_comm = 0;
  int64_t bytes_sent = 0;
  int64_t wire_bytes = 0;
  MemoryPeak peak_memory;
};

struct TraceSummary {
  std::optional<int> step;  // the step analysed, or none for the whole trace
  Interval window;
  std::vector<RankSummary> ranks;  // one per rank, 0..num_ranks-1
  double mean_bubble_fraction = 0;
  double max_bubble_fraction = 0;
  double mean_overlap_fraction = 0;  // over ranks that communicate
  int64_t total_bytes_sent = 0;
  int64_t wire_bytes = 0;  // sum of the ranks' wire_bytes
};

// The window of `step` (see above), or the whole trace without one. Empty trace: {0, 0}.
// Throws std::invalid_argument when no step-lane event has that step.
Interval analysis_window(const Trace& trace, std::optional<int> step = std::nullopt);
TraceSummary analyze(const Trace& trace, std::optional<int> step = std::nullopt);

// ---- Collective bandwidth, as nccl-tests reports it ----
// algbw = bytes / seconds (bytes = the buffer size each rank passes to the collective).
// busbw = algbw * factor, the rate each link must sustain, comparable to the hardware peak:
//   all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all, all_to_all_v (n-1)/n (for
//   all_to_all_v, bytes = what this rank sends, exact when the blocks are equal);
//   broadcast, reduce, send, recv 1.
// Unknown kinds throw std::invalid_argument; seconds <= 0 gives zeros.
struct Bandwidth {
  double algbw = 0;  // bytes per second
  double busbw = 0;  // bytes per second
};
double bus_bandwidth_factor(std::string_view kind, int n_ranks);
Bandwidth collective_bandwidth(int64_t bytes, double seconds, std::string_view kind, int n_ranks);

}  // namespace mgpu::trace

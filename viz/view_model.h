// The dashboard's view model: everything the drawing code needs to know about a trace, computed
// without a window so it can be tested (and benchmarked) on its own.
//
//   TimeAxis    seconds <-> pixels: zoom around a point, pan, fit a time range to the width.
//   TraceView   one trace, indexed for drawing:
//                 - per rank, per lane: events sorted by start (binary search finds what is
//                   on screen; runs of sub-pixel events are merged into one "dense" block),
//                 - idle gaps (pipeline bubbles) of each rank's compute lane,
//                 - partners of an event (the matching send/recv, or every member of the same
//                   collective: same group + seq), for click-select highlighting,
//                 - memory over time stacked by category (cumulative sums per sample),
//                 - a per-rank summary (busy, comm, idle, bubble %, overlap %, peak memory),
//                 - a mixture-of-experts run's tokens per expert per rank (expert load),
//                 - the device mesh the run used (rows labelled "GPU 5  dp1 pp0 tp1") and its
//                   communication groups ("tp0", "dp1", "world"), to highlight one group.
//   LaneLayout  where each rank's lane group sits vertically ("GPU r": compute, comm).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/parallel/mesh.h"
#include "core/runtime/trace_event.h"
#include "core/trace/expert_load.h"

namespace mgpu::viz {

// ---- time <-> pixel
// ------------------------------------------------------------------------------

// Maps the visible time range [t0, t1] (seconds) onto the pixel range [x0, x0 + width].
struct TimeAxis {
  double t0 = 0, t1 = 1;     // visible time range
  double x0 = 0, width = 1;  // pixels
  // The time the ruler calls 0 (the shown step's start): labels read t - origin.
  double origin = 0;

  double seconds_per_pixel() const { return (t1 - t0) / width; }
  double to_px(double t) const { return x0 + (t - t0) / (t1 - t0) * width; }
  double to_time(double px) const { return t0 + (px - x0) / width * (t1 - t0); }

  // Show [start, end] across the whole width, with a small margin on both sides.
  void fit(double start, double end, double margin_fraction = 0.01);
  // Zoom by `factor` (> 1 zooms in) keeping the time under pixel `anchor_px` where it is.
  void zoom(double factor, double anchor_px);
  // Move the view by `dx_px` pixels (dragging right shows earlier times).
  void pan(double dx_px);
};

// "0", "250 ns", "1.5 us", "12 ms", "2.25 s": picks the unit from the magnitude of `step`, the
// spacing of the ticks being labelled, so every label on a ruler uses the same unit.
std::string format_time(double seconds, double step);
// A duration on its own ("3.20 ms").
std::string format_duration(double seconds);
// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(double bytes);
// "27.3%" for 0.273.
std::string format_percent(double fraction);
// Thousands separators: 1234567 -> "1,234,567" (rounded to a whole number).
std::string format_count(double value);

// Ruler ticks for an axis: a 1/2/5 x 10^k step so that ticks are at least `min_spacing_px` apart,
// placed at axis.origin + k * step, so one tick sits on the origin.
struct Ticks {
  double step = 0;
  std::vector<double> times;  // absolute times (for to_px); label them with time - axis.origin
};
Ticks ruler_ticks(const TimeAxis& axis, double min_spacing_px);

// ---- culling and merging
// -------------------------------------------------------------------------

// One thing to draw on a lane: a single event, or a "dense" block of `count` consecutive events
// each narrower than a pixel, merged so a 200k-event trace draws a few thousand rectangles.
struct Block {
  double start = 0, end = 0;  // seconds
  int event = -1;             // index into Trace::events of the first event in the block
  int count = 1;              // > 1: a dense block
  bool dense() const { return count > 1; }
};

// An idle interval on a rank's compute lane inside the run window: a pipeline bubble.
struct Gap {
  double start = 0, end = 0;
  double dur() const { return end - start; }
};

// Memory at one sample, stacked: cumulative[c] = bytes of categories 0..c (MemCategory order),
// so category c fills [cumulative[c-1], cumulative[c]] and cumulative.back() is the total.
struct StackedSample {
  double time = 0;
  std::array<int64_t, 6> cumulative{};
  int64_t total() const { return cumulative.back(); }
};

// A span of memory to draw: a sample held from `start` until the next sample; the last sample is
// held to the end of the run or of the visible window, whichever is later.
// When several samples fall within one pixel the one with the largest total stands for them.
struct MemorySpan {
  double start = 0, end = 0;
  int sample = 0;  // index into TraceView::memory(rank)
};

// From core/trace/analysis (analyze()), plus when the memory peak happens.
struct RankSummary {
  double busy = 0;       // seconds the compute lane is busy (union of intervals)
  double comm = 0;       // seconds the comm lane is busy = comm_wire + comm_wait
  double comm_wire = 0;  // of which bytes move
  double comm_wait = 0;  // of which it waits for a partner (trace::RankSummary)
  double idle = 0;       // run window - busy
  double bubble = 0;     // idle / run window (fraction)
  double overlap = 0;    // (compute ∩ comm) / comm (fraction; 0 with no comm)
  int64_t bytes_sent = 0;
  int64_t peak_bytes = 0;  // highest total of the memory counters
  double peak_time = 0;
};

class TraceView {
 public:
  explicit TraceView(trace::Trace trace);

  const trace::Trace& trace() const { return trace_; }
  const trace::Event& event(int i) const { return trace_.events[i]; }
  int num_ranks() const { return num_ranks_; }
  // The run window: earliest start to latest end over every event (as in trace::analyze).
  double run_start() const { return run_start_; }
  double run_end() const { return run_end_; }

  // Indices of a lane's events, sorted by start.
  const std::vector<int>& lane_events(int rank, trace::Lane lane) const;
  // What to draw on a lane for the visible range of `axis`: off-screen events culled (binary
  // search), consecutive sub-pixel events merged into dense blocks.
  std::vector<Block> visible_blocks(int rank, trace::Lane lane, const TimeAxis& axis) const;
  // The topmost event under time `t` on a lane (within `slack` seconds), or -1.
  int event_at(int rank, trace::Lane lane, double t, double slack) const;

  const std::vector<Gap>& idle_gaps(int rank) const { return gaps_[rank]; }
  // The events that belong with event `i`: its send/recv partner, or the other members of its
  // collective (same group and seq). Never contains `i` itself.
  std::vector<int> partners(int i) const;

  const std::vector<StackedSample>& memory(int rank) const { return memory_[rank]; }
  std::vector<MemorySpan> visible_memory(int rank, const TimeAxis& axis) const;
  // The largest total over all ranks (for a shared memory scale).
  int64_t max_memory() const { return max_memory_; }
  // Device capacity from metadata["profile"]["memory_capacity_GiB"], in bytes, if present.
  std::optional<double> memory_capacity() const { return capacity_; }

  const RankSummary& summary(int rank) const { return summary_[rank]; }
  // The step the summary describes (the last one; a run of one step: that step), or none: a trace
  // without steps, summarised over the whole run.
  std::optional<int> summary_step() const { return summary_step_; }
  // How many training steps the trace has (0: none marked).
  int num_steps() const { return num_steps_; }
  // Where the shown step starts (the time the ruler calls 0): summary_step()'s, else the run's.
  double shown_start() const;
  // A mixture-of-experts run's routing in the shown step (the summary's): per MoE block, each
  // rank's kept tokens per expert (core/trace/expert_load.h); empty for a dense model.
  const std::vector<trace::ExpertLoad>& expert_loads() const { return expert_loads_; }
  // Theory from metadata["predictions"][key], if it is a number.
  std::optional<double> prediction(const std::string& key) const;

  // The device mesh of the run, from the axes in metadata["config"] ("tp", "cp", "dp", "pp"; a
  // missing one is 1): none when no axis is > 1 or they do not multiply to the trace's ranks.
  std::optional<parallel::MeshShape> mesh() const { return mesh_; }
  // A pipeline run (a schedule over more than one stage): only there is idle time a "bubble".
  bool is_pipeline() const;
  // The row label: "GPU 5  dp1 pp0 tp1" on a mesh (its axes > 1, coordinates from
  // parallel::mesh_coords), "GPU 5" without one.
  std::string rank_label(int rank) const;
  // The communication groups named on the trace's events ("dp0", "pp1", "tp0", "world"), sorted.
  const std::vector<std::string>& comm_groups() const { return group_names_; }
  // Every event of one group (its collectives, sends and recvs), by index in start order per
  // rank; empty for a name not in comm_groups().
  const std::vector<int>& group_events(const std::string& group) const;
  // Whether event `i` belongs to `group` (constant time).
  bool in_group(int i, const std::string& group) const;
  // The same events as group_events() in drawing order (rank, lane, start), their times copied
  // next to each other: the highlight walks these every frame, not the big Event structs.
  struct Span {
    double start = 0, end = 0;
    int rank = 0;
    trace::Lane lane = trace::Lane::comm;
    int event = 0;
  };
  const std::vector<Span>& group_spans(const std::string& group) const;
  // The group's members: the ranks with an event in it, ascending; empty for an unknown name.
  const std::vector<int>& group_ranks(const std::string& group) const;

 private:
  struct LaneIndex {
    std::vector<int> events;        // sorted by start
    std::vector<double> starts;     // their start times (contiguous, for binary search)
    std::vector<double> max_end;    // running max of end over `events` (monotonic: searchable)
    std::vector<double> split_key;  // max(width, gap before): what ends a dense block
    std::vector<double> chunk_max;  // max of split_key per kChunk events
    static constexpr size_t kChunk = 64;
    // The first k in [from, to) with split_key[k] >= threshold, or `to`.
    size_t first_split(size_t from, size_t to, double threshold) const;
  };
  const LaneIndex& lane(int rank, trace::Lane l) const {
    return lanes_[rank * trace::kNumLanes + static_cast<int>(l)];
  }
  void index_lanes();
  void compute_gaps_and_summary();
  // A pipeline's bubble belongs to one step: on a multi-step pipeline trace its idle gaps are
  // cut at every step's start and end (each step's window over all ranks, as
  // trace::analysis_window takes it), so the shown step's bubbles lie inside its window, start
  // to end, and their labels are that step's idle time. Other traces: no cuts.
  std::vector<double> gap_cuts() const;
  void add_gap(int rank, double start, double end, const std::vector<double>& cuts, double min_gap);
  void index_partners();
  void stack_memory();
  void read_mesh();
  void index_groups();
  int group_id(const std::string& group) const;  // index into group_names_, or -1

  trace::Trace trace_;
  int num_ranks_ = 0;
  double run_start_ = 0, run_end_ = 0;
  std::vector<LaneIndex> lanes_;
  std::vector<std::vector<Gap>> gaps_;
  std::vector<RankSummary> summary_;
  std::optional<int> summary_step_;
  int num_steps_ = 0;
  std::vector<trace::ExpertLoad> expert_loads_;
  std::vector<int> partner_group_;        // per event: index into groups_, or -1
  std::vector<std::vector<int>> groups_;  // events that belong together
  std::vector<std::vector<StackedSample>> memory_;
  int64_t max_memory_ = 0;
  std::optional<double> capacity_;
  std::optional<parallel::MeshShape> mesh_;
  std::vector<std::string> group_names_;         // sorted
  std::vector<std::vector<int>> group_members_;  // per group name: its events
  std::vector<std::vector<int>> group_ranks_;    // per group name: the ranks in it
  std::vector<std::vector<Span>> group_spans_;   // per group name: its events' times
  std::vector<int> event_group_;                 // per event: index into group_names_, or -1
};

// ---- vertical layout
// -----------------------------------------------------------------------------

// Lane groups stacked top to bottom: "GPU 0" (compute, comm), "GPU 1" (compute, comm), ...
struct LaneLayout {
  double top = 0;  // pixels
  double lane_height = 22;
  double lane_gap = 2;                     // between the lanes of one rank
  double group_gap = 8;                    // between ranks
  static constexpr int kLanesPerRank = 2;  // compute, comm (the step lane is not drawn)

  double group_height() const {
    return kLanesPerRank * lane_height + (kLanesPerRank - 1) * lane_gap;
  }
  double group_top(int rank) const { return top + rank * (group_height() + group_gap); }
  double lane_top(int rank, trace::Lane lane) const {
    return group_top(rank) + static_cast<int>(lane) * (lane_height + lane_gap);
  }
  double total_height(int num_ranks) const {
    return num_ranks * group_height() + std::max(0, num_ranks - 1) * group_gap;
  }
  // Which rank/lane is at pixel y, if any.
  std::optional<std::pair<int, trace::Lane>> hit(double y, int num_ranks) const;
};

// ---- the words of the header (viz/header.cpp)
// ------------------------------------------------------------

// The run named from its metadata: "lesson pipeline   schedule 1f1b   4 GPUs (mesh pp 4)
// 8 micro-batches   modeled clock   8xH100-NVLink".
std::string describe_run(const TraceView& view);
// metadata["predictions"] with units and what each is: "bubble 29.8% measured, mean over ranks
// (theory 27.3%)", "bytes per rank 646 KiB (theory)", "speedup 2.73x (measured)". Empty when the
// trace has none.
std::string describe_predictions(const TraceView& view);

}  // namespace mgpu::viz

#include "core/trace/analysis.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "core/theory/collectives.h"

namespace mgpu::trace {

std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return !(i.end > i.begin); });
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> merged;
  for (const Interval& i : intervals) {
    if (!merged.empty() && i.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, i.end);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

void IntervalUnion::add(Interval i) {
  if (!(i.end > i.begin)) return;
  auto next = spans_.upper_bound(i.begin);  // the first span starting after i
  if (next != spans_.begin()) {
    auto previous = std::prev(next);
    if (i.begin <= previous->second) {  // overlaps or touches the span before: one span
      i.begin = previous->first;
      i.end = std::max(i.end, previous->second);
      spans_.erase(previous);
    }
  }
  while (next != spans_.end() && next->first <= i.end) {  // and every later one it reaches
    i.end = std::max(i.end, next->second);
    next = spans_.erase(next);
  }
  spans_.emplace(i.begin, i.end);
}

std::vector<Interval> IntervalUnion::clipped(Interval window) const {
  std::vector<Interval> out;
  for (const auto& [begin, end] : spans_) {
    const Interval c{std::max(begin, window.begin), std::min(end, window.end)};
    if (c.end > c.begin) out.push_back(c);
  }
  return out;
}

double total_length(const std::vector<Interval>& merged) {
  double sum = 0;
  for (const Interval& i : merged) sum += i.length();
  return sum;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double begin = std::max(a[i].begin, b[j].begin);
    const double end = std::min(a[i].end, b[j].end);
    if (end > begin) out.push_back({begin, end});
    (a[i].end < b[j].end) ? ++i : ++j;  // advance whichever finishes first
  }
  return out;
}

namespace {

// One rank's events, in trace order. The per-rank passes read only these: analyze() indexes a
// trace once, where filtering the whole trace per rank read a 4096-rank trace 4096 times.
using RankEvents = std::vector<const Event*>;

RankEvents events_of(const Trace& trace, int rank) {
  RankEvents mine;
  for (const Event& e : trace.events)
    if (e.rank == rank) mine.push_back(&e);
  return mine;
}

std::vector<Interval> lane_intervals_of(const RankEvents& events, Lane lane, Interval window) {
  std::vector<Interval> clipped;
  for (const Event* e : events) {
    if (e->lane != lane) continue;
    clipped.push_back({std::max(e->start, window.begin), std::min(e->end(), window.end)});
  }
  return merge_intervals(std::move(clipped));
}

std::vector<Interval> comm_wire_intervals_of(const RankEvents& events, Interval window) {
  std::vector<Interval> clipped;
  for (const Event* e : events) {
    if (e->lane != Lane::comm) continue;
    clipped.push_back({std::max(e->start + e->wait, window.begin), std::min(e->end(), window.end)});
  }
  return merge_intervals(std::move(clipped));
}

}  // namespace

std::vector<Interval> lane_intervals(const Trace& trace, int rank, Lane lane, Interval window) {
  return lane_intervals_of(events_of(trace, rank), lane, window);
}

std::vector<Interval> comm_wire_intervals(const Trace& trace, int rank, Interval window) {
  return comm_wire_intervals_of(events_of(trace, rank), window);
}

// ---------------------------------------------------------------------------------------------

namespace {

int64_t sum_of(const CounterSample& s) {
  int64_t total = 0;
  for (int64_t b : s.bytes) total += b;
  return total;
}

void raise_peak(MemoryPeak& peak, const CounterSample& s) {
  for (size_t c = 0; c < peak.by_category.size(); ++c) {
    peak.by_category[c] = std::max(peak.by_category[c], s.bytes[c]);
  }
  peak.total = std::max(peak.total, sum_of(s));
}

// Samples in the window plus the one in force when it opens.
MemoryPeak peak_in_window(const MemoryTimeline& timeline, Interval window) {
  MemoryPeak peak;
  const CounterSample* in_force_at_start = nullptr;
  for (const CounterSample& s : timeline.samples) {
    if (s.time <= window.begin) in_force_at_start = &s;
    if (s.time > window.begin && s.time <= window.end) raise_peak(peak, s);
  }
  if (in_force_at_start) raise_peak(peak, *in_force_at_start);
  return peak;
}

// Sums `field` over the rank's comm-lane events starting in the window (or the whole trace).
template <class Field>
int64_t comm_sum_in(const RankEvents& events, Interval window, bool whole_trace, Field field) {
  int64_t sum = 0;
  for (const Event* e : events) {
    if (e->lane != Lane::comm) continue;
    if (whole_trace || (e->start >= window.begin && e->start < window.end)) sum += field(*e);
  }
  return sum;
}

MemoryTimeline timeline_of(std::vector<CounterSample> samples) {
  MemoryTimeline timeline;
  timeline.samples = std::move(samples);
  std::stable_sort(timeline.samples.begin(), timeline.samples.end(),
                   [](const CounterSample& a, const CounterSample& b) { return a.time < b.time; });
  for (const CounterSample& s : timeline.samples) raise_peak(timeline.peak, s);
  return timeline;
}

RankSummary summarize_rank(const RankEvents& events, std::vector<CounterSample> counters, int rank,
                           Interval window, bool whole_trace) {
  RankSummary r;
  r.rank = rank;
  r.span = window.length();
  const auto compute = lane_intervals_of(events, Lane::compute, window);
  const auto comm = lane_intervals_of(events, Lane::comm, window);
  r.busy = total_length(compute);
  r.comm = total_length(comm);
  r.comm_wire = total_length(comm_wire_intervals_of(events, window));
  r.comm_wait = r.comm - r.comm_wire;
  r.idle = r.span - r.busy;
  r.bubble_fraction = r.span > 0 ? r.idle / r.span : 0;
  r.overlap = total_length(intersect(compute, comm));
  r.overlap_fraction = r.comm > 0 ? r.overlap / r.comm : 0;
  r.exposed_comm = r.comm - r.overlap;
  r.bytes_sent = comm_sum_in(events, window, whole_trace,
                             [](const Event& e) { return e.op == "recv" ? 0 : e.bytes; });
  r.wire_bytes =
      comm_sum_in(events, window, whole_trace, [](const Event& e) { return e.sent_bytes; });
  r.peak_memory = peak_in_window(timeline_of(std::move(counters)), window);
  return r;
}

}  // namespace

MemoryTimeline memory_timeline(const Trace& trace, int rank) {
  std::vector<CounterSample> mine;
  for (const CounterSample& s : trace.counters)
    if (s.rank == rank) mine.push_back(s);
  return timeline_of(std::move(mine));
}

Interval analysis_window(const Trace& trace, std::optional<int> step) {
  double begin = std::numeric_limits<double>::infinity();
  double end = -std::numeric_limits<double>::infinity();
  for (const Event& e : trace.events) {
    if (step && (e.lane != Lane::step || e.step != *step)) continue;
    begin = std::min(begin, e.start);
    end = std::max(end, e.end());
  }
  if (begin > end) {
    if (step) throw std::invalid_argument(fmt::format("trace has no step {}", *step));
    return {0, 0};
  }
  return {begin, end};
}

TraceSummary analyze(const Trace& trace, std::optional<int> step) {
  TraceSummary summary;
  summary.step = step;
  summary.window = analysis_window(trace, step);
  int communicating = 0;
  // Every rank's events and samples in one pass (a rank outside [0, num_ranks) is not summarised).
  const size_t ranks = static_cast<size_t>(std::max(trace.num_ranks, 0));
  std::vector<RankEvents> events(ranks);
  for (const Event& e : trace.events)
    if (e.rank >= 0 && static_cast<size_t>(e.rank) < ranks) events[e.rank].push_back(&e);
  std::vector<std::vector<CounterSample>> counters(ranks);
  for (const CounterSample& c : trace.counters)
    if (c.rank >= 0 && static_cast<size_t>(c.rank) < ranks) counters[c.rank].push_back(c);
  for (int rank = 0; rank < trace.num_ranks; ++rank) {
    RankSummary r = summarize_rank(events[rank], std::move(counters[rank]), rank, summary.window,
                                   !step.has_value());
    summary.mean_bubble_fraction += r.bubble_fraction;
    summary.max_bubble_fraction = std::max(summary.max_bubble_fraction, r.bubble_fraction);
    if (r.comm > 0) {
      summary.mean_overlap_fraction += r.overlap_fraction;
      ++communicating;
    }
    summary.total_bytes_sent += r.bytes_sent;
    summary.wire_bytes += r.wire_bytes;
    summary.ranks.push_back(r);
  }
  if (trace.num_ranks > 0) summary.mean_bubble_fraction /= trace.num_ranks;
  if (communicating > 0) summary.mean_overlap_fraction /= communicating;
  return summary;
}

// ---------------------------------------------------------------------------------------------

double bus_bandwidth_factor(std::string_view kind, int n_ranks) {
  if (n_ranks < 1) throw std::invalid_argument("bus_bandwidth_factor: n_ranks must be >= 1");
  const double n = n_ranks;
  if (kind == "all_reduce") return theory::ring_all_reduce_factor(n);
  if (kind == "reduce_scatter" || kind == "all_gather" || kind == "all_to_all" ||
      kind == "all_to_all_v")
    return theory::ring_shard_factor(n);
  if (kind == "broadcast" || kind == "reduce" || kind == "send" || kind == "recv") return 1;
  throw std::invalid_argument(fmt::format("bus_bandwidth_factor: unknown collective '{}'", kind));
}

Bandwidth collective_bandwidth(int64_t bytes, double seconds, std::string_view kind, int n_ranks) {
  const double factor = bus_bandwidth_factor(kind, n_ranks);
  if (!(seconds > 0)) return {};
  const double algbw = static_cast<double>(bytes) / seconds;
  return {algbw, algbw * factor};
}

}  // namespace mgpu::trace

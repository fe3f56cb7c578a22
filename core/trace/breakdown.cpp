#include "core/trace/breakdown.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

namespace mgpu::trace {

namespace {

bool is_memory_op(const Event& e) {
  return e.cat == cat::memory;
}

bool is_device_op(const Event& e) {
  return e.lane == Lane::compute || e.lane == Lane::comm;
}

double compute_only(const Trace& trace, int rank, Interval window) {
  std::vector<Interval> clipped;
  for (const Event& e : trace.events) {
    if (e.rank != rank || e.lane != Lane::compute || is_memory_op(e)) continue;
    clipped.push_back({std::max(e.start, window.begin), std::min(e.end(), window.end)});
  }
  return total_length(merge_intervals(std::move(clipped)));
}

IdleByCause idle_causes(const Trace& trace, int rank, Interval window,
                        const std::vector<double>& launch_end) {
  std::vector<Interval> busy;
  std::multimap<double, double> launch_by_start;  // op start -> launch end (or -1)
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.rank != rank || !is_device_op(e)) continue;
    busy.push_back({std::max(e.start, window.begin), std::min(e.end(), window.end)});
    if (e.start >= window.begin && e.start < window.end)
      launch_by_start.emplace(e.start, i < launch_end.size() ? launch_end[i] : -1);
  }
  const std::vector<Interval> merged = merge_intervals(std::move(busy));
  IdleByCause idle;
  double gap_start = window.begin;
  auto charge = [&](double a, double b) {
    if (!(b > a)) return;
    if (b >= window.end) return void(idle.other += b - a);
    double launch = -1;  // of the op launched first among those starting at b
    const auto [first, last] = launch_by_start.equal_range(b);
    for (auto it = first; it != last; ++it)
      if (it->second >= 0 && (launch < 0 || it->second < launch)) launch = it->second;
    if (launch < 0)
      idle.other += b - a;
    else if (launch >= a)
      idle.host += b - a;
    else
      idle.kernel += b - a;
  };
  for (const Interval& i : merged) {
    charge(gap_start, i.begin);
    gap_start = i.end;
  }
  charge(gap_start, window.end);
  return idle;
}

// The memory samples in `window` and, per rank, the one in force when it opens.
std::vector<CounterSample> counters_for(const std::vector<CounterSample>& counters,
                                        Interval window) {
  std::vector<CounterSample> out;
  std::map<int, const CounterSample*> in_force;
  for (const CounterSample& c : counters) {
    if (c.time > window.begin && c.time <= window.end) out.push_back(c);
    const CounterSample*& last = in_force[c.rank];
    if (c.time <= window.begin && (!last || c.time >= last->time)) last = &c;
  }
  for (const auto& [rank, c] : in_force)
    if (c) out.push_back(*c);
  return out;
}

// The events and memory samples that bear on `window`: a step's analysis then costs the step's
// events, not the whole trace's (a long real trace has thousands of steps).
struct Slice {
  Trace trace;
  std::vector<double> launch_end;
};
Slice slice(const Trace& trace, Interval window, const std::vector<double>& launch_end) {
  Slice out;
  out.trace.num_ranks = trace.num_ranks;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.end() < window.begin || e.start > window.end) continue;
    out.trace.events.push_back(e);
    out.launch_end.push_back(i < launch_end.size() ? launch_end[i] : -1);
  }
  out.trace.counters = counters_for(trace.counters, window);
  return out;
}

RankBreakdown rank_breakdown(const Trace& trace, const RankSummary& s, Interval window,
                             const std::vector<double>& launch_end) {
  RankBreakdown r;
  r.rank = s.rank;
  r.summary = s;
  r.compute = compute_only(trace, s.rank, window);
  // Exact arithmetic gives >= 0; rounding can leave -1e-19, which would print as "-0".
  r.exposed_memory = std::max(0.0, s.busy - r.compute);
  r.exposed_comm = s.exposed_comm;
  r.device_idle = std::max(0.0, s.idle - s.exposed_comm);
  r.idle_by_cause = idle_causes(trace, s.rank, window, launch_end);
  return r;
}

}  // namespace

std::vector<int> trace_steps(const Trace& trace) {
  std::set<int> steps;
  for (const Event& e : trace.events)
    if (e.lane == Lane::step && e.step >= 0) steps.insert(e.step);
  return {steps.begin(), steps.end()};
}

StepBreakdown breakdown(const Trace& trace, std::optional<int> step,
                        const std::vector<double>& launch_end) {
  StepBreakdown out;
  out.step = step;
  const Slice part = step ? slice(trace, analysis_window(trace, step), launch_end) : Slice{};
  const Trace& events = step ? part.trace : trace;
  const std::vector<double>& launches = step ? part.launch_end : launch_end;
  const TraceSummary summary = analyze(events, step);
  out.window = summary.window;
  for (const RankSummary& s : summary.ranks)
    out.ranks.push_back(rank_breakdown(events, s, summary.window, launches));
  if (out.ranks.size() >= 2) {
    auto by_work = [](const RankBreakdown& a, const RankBreakdown& b) {
      return a.summary.busy < b.summary.busy;
    };
    const auto [least, most] = std::minmax_element(out.ranks.begin(), out.ranks.end(), by_work);
    out.straggler = most->rank;
    out.straggler_lead = most->summary.busy - least->summary.busy;
  }
  return out;
}

std::vector<StepBreakdown> breakdown_steps(const Trace& trace,
                                           const std::vector<double>& launch_end) {
  std::map<int, Interval> windows;  // one pass: each step's window over every rank
  for (const Event& e : trace.events) {
    if (e.lane != Lane::step || e.step < 0) continue;
    auto [it, fresh] = windows.try_emplace(e.step, Interval{e.start, e.end()});
    it->second = {std::min(it->second.begin, e.start), std::max(it->second.end, e.end())};
  }
  if (windows.empty()) return {breakdown(trace, std::nullopt, launch_end)};
  // One more pass deals each event to the steps it overlaps (windows sorted by their start).
  std::vector<std::pair<Interval, int>> sorted;
  double longest = 0;
  for (const auto& [step, w] : windows) {
    sorted.push_back({w, step});
    longest = std::max(longest, w.length());
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first.begin < b.first.begin; });
  // Each step's events by index: a step's copy is made only while that step is analysed, so a
  // big trace is never held twice.
  std::vector<std::vector<size_t>> parts(sorted.size());
  // Steps that overlap much (a hostile trace: every step spanning the run) would copy each event
  // once per step: past a few windows per event, each step scans the trace instead (memory stays
  // bounded; time is then steps x events, as calling breakdown() per step).
  const size_t max_copies = 4 * trace.events.size() + (size_t{1} << 20);
  size_t copies = 0;
  for (size_t i = 0; i < trace.events.size() && copies <= max_copies; ++i) {
    const Event& e = trace.events[i];
    auto it = std::upper_bound(sorted.begin(), sorted.end(), e.end(),
                               [](double t, const auto& w) { return t < w.first.begin; });
    while (it != sorted.begin()) {
      --it;
      if (it->first.begin + longest < e.start) break;  // no earlier window reaches the event
      ++copies;  // a window looked at counts too: the pass stays linear or gives way
      if (it->first.end < e.start) continue;
      parts[static_cast<size_t>(it - sorted.begin())].push_back(i);
    }
  }
  std::vector<StepBreakdown> out;
  if (copies > max_copies) {
    parts.clear();
    for (const auto& [step, window] : windows) out.push_back(breakdown(trace, step, launch_end));
    return out;
  }
  for (size_t k = 0; k < sorted.size(); ++k) {
    Slice p;
    p.trace.num_ranks = trace.num_ranks;
    for (const size_t i : parts[k]) {
      p.trace.events.push_back(trace.events[i]);
      p.launch_end.push_back(i < launch_end.size() ? launch_end[i] : -1);
    }
    p.trace.counters = counters_for(trace.counters, sorted[k].first);
    out.push_back(breakdown(p.trace, sorted[k].second, p.launch_end));
    parts[k] = {};
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

namespace {

// The top operations of one rank's events (pointers in trace order).
std::vector<KernelTime> top_of(const std::vector<const Event*>& events, Interval window,
                               size_t per_category) {
  static const char* const kCategories[] = {"comm", "compute", "memory"};
  std::map<std::pair<int, std::string_view>, KernelTime> by_name;  // names stay in the trace
  for (const Event* event : events) {
    const Event& e = *event;
    if (!is_device_op(e)) continue;
    const double seconds = std::min(e.end(), window.end) - std::max(e.start, window.begin);
    if (!(seconds > 0) && !(e.dur == 0 && e.start >= window.begin && e.start < window.end))
      continue;
    const int category = e.lane == Lane::comm ? 0 : is_memory_op(e) ? 2 : 1;
    KernelTime& k = by_name[{category, e.name}];
    k.seconds += std::max(seconds, 0.0);
    ++k.count;
  }
  std::vector<KernelTime> all;
  for (auto& [key, k] : by_name) {
    k.category = kCategories[key.first];
    k.name = std::string(key.second);
    all.push_back(std::move(k));
  }
  std::sort(all.begin(), all.end(), [](const KernelTime& a, const KernelTime& b) {
    if (a.category != b.category) return a.category < b.category;
    if (a.seconds != b.seconds) return a.seconds > b.seconds;
    return a.name < b.name;
  });
  std::vector<KernelTime> top;
  std::map<std::string, size_t> taken;
  for (KernelTime& k : all)
    if (taken[k.category]++ < per_category) top.push_back(std::move(k));
  return top;
}

}  // namespace

std::vector<KernelTime> top_kernels(const Trace& trace, int rank, Interval window,
                                    size_t per_category) {
  std::vector<const Event*> mine;
  for (const Event& e : trace.events)
    if (e.rank == rank) mine.push_back(&e);
  return top_of(mine, window, per_category);
}

std::vector<std::vector<KernelTime>> top_kernels_by_rank(const Trace& trace, Interval window,
                                                         size_t per_category) {
  std::vector<std::vector<const Event*>> by_rank(static_cast<size_t>(std::max(trace.num_ranks, 0)));
  for (const Event& e : trace.events)
    if (e.rank >= 0 && static_cast<size_t>(e.rank) < by_rank.size()) by_rank[e.rank].push_back(&e);
  std::vector<std::vector<KernelTime>> tops;
  for (const auto& events : by_rank) tops.push_back(top_of(events, window, per_category));
  return tops;
}

}  // namespace mgpu::trace

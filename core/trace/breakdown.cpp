#include "core/trace/breakdown.h"

#include <algorithm>
#include <map>
#include <set>

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
  std::map<int, const CounterSample*> in_force;  // per rank, the last sample at or before begin
  for (const CounterSample& c : trace.counters) {
    if (c.time > window.begin && c.time <= window.end) out.trace.counters.push_back(c);
    const CounterSample*& last = in_force[c.rank];
    if (c.time <= window.begin && (!last || c.time >= last->time)) last = &c;
  }
  for (const auto& [rank, c] : in_force)
    if (c) out.trace.counters.push_back(*c);
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

std::vector<KernelTime> top_kernels(const Trace& trace, int rank, Interval window,
                                    size_t per_category) {
  std::map<std::pair<std::string, std::string>, KernelTime> by_name;
  for (const Event& e : trace.events) {
    if (e.rank != rank || !is_device_op(e)) continue;
    const double seconds = std::min(e.end(), window.end) - std::max(e.start, window.begin);
    if (!(seconds > 0) && !(e.dur == 0 && e.start >= window.begin && e.start < window.end))
      continue;
    const std::string category = e.lane == Lane::comm ? "comm"
                                 : is_memory_op(e)    ? "memory"
                                                      : "compute";
    KernelTime& k = by_name[{category, e.name}];
    k.category = category;
    k.name = e.name;
    k.seconds += std::max(seconds, 0.0);
    ++k.count;
  }
  std::vector<KernelTime> all;
  for (auto& [key, k] : by_name) all.push_back(std::move(k));
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

}  // namespace mgpu::trace

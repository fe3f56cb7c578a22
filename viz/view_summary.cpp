// A trace's idle gaps (pipeline bubbles, cut at step boundaries) and its per-rank summary, with
// the numbers from core/trace/analysis so the dashboard shows what the lesson printed.
#include "viz/view_model.h"

#include "core/trace/analysis.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

std::vector<double> TraceView::gap_cuts() const {
  if (!summary_step_ || !is_pipeline()) return {};
  std::map<int, trace::Interval> steps;  // step -> its window over every rank
  for (const Event& e : trace_.events) {
    if (e.lane != Lane::step || e.step < 0) continue;
    auto [it, fresh] = steps.try_emplace(e.step, trace::Interval{e.start, e.end()});
    if (!fresh)
      it->second = {std::min(it->second.begin, e.start), std::max(it->second.end, e.end())};
  }
  std::vector<double> cuts;
  for (const auto& [step, window] : steps) {
    cuts.push_back(window.begin);
    cuts.push_back(window.end);
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

void TraceView::add_gap(int rank, double start, double end, const std::vector<double>& cuts,
                        double min_gap) {
  for (auto c = std::upper_bound(cuts.begin(), cuts.end(), start); c != cuts.end() && *c < end;
       ++c) {
    if (*c - start <= min_gap || end - *c <= min_gap) continue;
    gaps_[rank].push_back({start, *c});
    start = *c;
  }
  gaps_[rank].push_back({start, end});
}

void TraceView::compute_gaps_and_summary() {
  gaps_.assign(num_ranks_, {});
  summary_.assign(num_ranks_, {});
  const double window = run_end_ - run_start_;
  const double min_gap = window * 1e-9;  // ignore floating-point slivers between touching events
  // The numbers come from core/trace/analysis, so the dashboard shows what the lesson printed:
  // like the lesson's table, a multi-step run is summarised by its last step.
  std::set<int> steps;
  for (const Event& e : trace_.events)
    if (e.lane == Lane::step && e.step >= 0) steps.insert(e.step);
  // A lesson reports its last step over that step's window (the step lane's events): a run of one
  // step too, whose window is not the whole trace (the world's start-up barrier comes before it).
  // Summarising the same window is what makes classroom mode and `mgpu run` print one bubble.
  summary_step_ = steps.empty() ? std::nullopt : std::optional<int>(*steps.rbegin());
  num_steps_ = static_cast<int>(steps.size());
  const trace::TraceSummary analysis = trace::analyze(trace_, summary_step_);
  expert_loads_ = trace::expert_loads(trace_, summary_step_);
  const std::vector<double> cuts = gap_cuts();
  for (int r = 0; r < num_ranks_; ++r) {
    // Bubbles: the holes between busy intervals of the compute lane, inside the run window.
    // The lane index is already sorted by start: one pass, no re-sorting of the whole trace.
    double cursor = run_start_;
    for (int i : lane(r, Lane::compute).events) {
      const Event& e = trace_.events[i];
      if (e.dur <= 0) continue;
      if (e.start - cursor > min_gap) add_gap(r, cursor, e.start, cuts, min_gap);
      cursor = std::max(cursor, e.end());
    }
    if (run_end_ - cursor > min_gap) add_gap(r, cursor, run_end_, cuts, min_gap);

    RankSummary& s = summary_[r];
    if (r < static_cast<int>(analysis.ranks.size())) {
      const trace::RankSummary& a = analysis.ranks[r];
      s.busy = a.busy;
      s.comm = a.comm;
      s.comm_wire = a.comm_wire;
      s.comm_wait = a.comm_wait;
      s.idle = a.idle;
      s.bubble = a.bubble_fraction;
      s.overlap = a.overlap_fraction;
      s.bytes_sent = a.wire_bytes;  // measured: what the rank put on the wire
    }
    for (const StackedSample& m : memory_[r]) {
      if (m.total() > s.peak_bytes) {
        s.peak_bytes = m.total();
        s.peak_time = m.time;
      }
    }
  }
}

double TraceView::shown_start() const {
  if (summary_step_) return trace::analysis_window(trace_, *summary_step_).begin;
  return run_start_;
}
}  // namespace mgpu::viz

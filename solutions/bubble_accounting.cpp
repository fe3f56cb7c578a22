// Reference bubble accounting.
//
// A rank is busy while at least one of its compute-lane events runs. Events on one lane may
// overlap (a kernel inside a larger scope, two streams), so busy time is the length of the UNION
// of the intervals, not the sum of durations: clip each event to the window, sort by start, and
// sweep, merging every interval that starts before the current run ends. Whatever part of the
// window is not busy is idle, and idle / span is the bubble fraction a pipeline lesson reports.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "exercises/exercises.h"

namespace mgpu::reference {

namespace {

using Span = std::pair<double, double>;  // [begin, end)

// The rank's compute-lane events clipped to [t0, t1]; empty pieces dropped.
std::vector<Span> compute_spans(const trace::Trace& trace, int rank, double t0, double t1) {
  std::vector<Span> spans;
  for (const trace::Event& e : trace.events) {
    if (e.rank != rank || e.lane != trace::Lane::compute) continue;
    double begin = std::max(e.start, t0), end = std::min(e.end(), t1);
    if (end > begin) spans.emplace_back(begin, end);
  }
  return spans;
}

// Length of the union of the spans.
double union_length(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, run_begin = 0, run_end = 0;
  bool open = false;
  for (auto [begin, end] : spans) {
    if (open && begin <= run_end) {
      run_end = std::max(run_end, end);
      continue;
    }
    if (open) total += run_end - run_begin;
    run_begin = begin;
    run_end = end;
    open = true;
  }
  if (open) total += run_end - run_begin;
  return total;
}

}  // namespace

std::vector<ex::RankIdle> bubble_accounting(const trace::Trace& trace, double t0, double t1) {
  if (t1 < t0) throw std::invalid_argument("bubble_accounting: window ends before it starts");
  const double span = t1 - t0;
  std::vector<ex::RankIdle> result;
  for (int rank = 0; rank < trace.num_ranks; ++rank) {
    ex::RankIdle r;
    r.rank = rank;
    r.busy = union_length(compute_spans(trace, rank, t0, t1));
    r.idle = span - r.busy;
    r.bubble_fraction = span > 0 ? r.idle / span : 0.0;
    result.push_back(r);
  }
  return result;
}

}  // namespace mgpu::reference

// Memory over time, per rank: the counters stacked by category, and the spans on screen (samples
// within one pixel merged, keeping the tallest).
#include "viz/view_model.h"

#include <algorithm>
#include <vector>

namespace mgpu::viz {

void TraceView::stack_memory() {
  memory_.assign(num_ranks_, {});
  for (const auto& c : trace_.counters) {
    if (c.rank < 0) continue;
    StackedSample s;
    s.time = c.time;
    int64_t sum = 0;
    for (size_t k = 0; k < c.bytes.size(); ++k) s.cumulative[k] = sum += c.bytes[k];
    memory_[c.rank].push_back(s);
  }
  for (auto& samples : memory_) {
    std::stable_sort(
        samples.begin(), samples.end(),
        [](const StackedSample& a, const StackedSample& b) { return a.time < b.time; });
    for (const auto& s : samples) max_memory_ = std::max(max_memory_, s.total());
  }
}

std::vector<MemorySpan> TraceView::visible_memory(int rank, const TimeAxis& axis) const {
  std::vector<MemorySpan> out;
  if (rank < 0 || rank >= num_ranks_) return out;
  const auto& samples = memory_[rank];
  const double px = axis.seconds_per_pixel();
  // A sample holds until the next one, so start from the last sample at or before t0.
  size_t i = std::upper_bound(samples.begin(), samples.end(), axis.t0,
                              [](double t, const StackedSample& s) { return t < s.time; }) -
             samples.begin();
  // A rank that exits releases everything: the lessons write a last, empty sample at teardown.
  // That is not what the step holds (the next step would find the model still there), so
  // trailing empty samples are not drawn and the last sample that holds memory runs on.
  size_t n = samples.size();
  while (n > 1 && samples[n - 1].total() == 0) --n;
  if (n > 0 && samples[n - 1].total() == 0) n = samples.size();  // nothing held at all
  if (i > n) i = n;
  if (i > 0) --i;
  // The last sample holds to the end of the run, or of the window when it shows more.
  const double end_of_run = std::max({run_end_, axis.t1, n > 0 ? samples[n - 1].time : 0.0});
  auto held_until = [&](size_t k) { return k + 1 < n ? samples[k + 1].time : end_of_run; };
  while (i < n && samples[i].time <= axis.t1) {
    MemorySpan span{samples[i].time, held_until(i), static_cast<int>(i)};
    ++i;
    // Several samples within one pixel: keep the tallest so peaks never disappear when zoomed out.
    while (i < n && samples[i].time - span.start < px) {
      if (samples[i].total() > samples[span.sample].total()) span.sample = static_cast<int>(i);
      span.end = held_until(i);
      ++i;
    }
    out.push_back(span);
  }
  return out;
}
}  // namespace mgpu::viz

// TraceView built from a trace: its run window, device capacity and per-lane event index, and what
// of a lane is on screen (culled, sub-pixel runs merged). Its other indexes: viz/view_*.cpp.
#include "viz/view_model.h"

#include "core/trace/analysis.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace mgpu::viz {

namespace {
constexpr double kMaxShownCapacity = double(int64_t{1} << 60);  // 1 EiB: more than any device
}  // namespace

using trace::Event;
using trace::Lane;

// ---- TraceView: indexing
// -------------------------------------------------------------------------

TraceView::TraceView(trace::Trace trace) : trace_(std::move(trace)) {
  num_ranks_ = trace_.num_ranks;
  for (const Event& e : trace_.events) num_ranks_ = std::max(num_ranks_, e.rank + 1);
  for (const auto& c : trace_.counters) num_ranks_ = std::max(num_ranks_, c.rank + 1);

  run_start_ = std::numeric_limits<double>::infinity();
  run_end_ = -run_start_;
  for (const Event& e : trace_.events) {
    run_start_ = std::min(run_start_, e.start);
    run_end_ = std::max(run_end_, e.end());
  }
  // The same window as core/trace/analysis: the events; counters only when there are no events.
  if (trace_.events.empty()) {
    for (const auto& c : trace_.counters) {
      run_start_ = std::min(run_start_, c.time);
      run_end_ = std::max(run_end_, c.time);
    }
  }
  if (!std::isfinite(run_start_)) run_start_ = run_end_ = 0;

  const auto& profile = trace_.metadata.is_object()
                            ? trace_.metadata.value("profile", nlohmann::json())
                            : nlohmann::json();
  if (profile.is_object() && profile.contains("memory_capacity_GiB") &&
      profile["memory_capacity_GiB"].is_number()) {
    capacity_ = profile["memory_capacity_GiB"].get<double>() * 1024.0 * 1024.0 * 1024.0;
    // The "theory" profile has no device memory (0): no capacity rather than "peak 6 MiB / 0 B";
    // nor for a capacity no device has (1e308 GiB would draw "of inf TiB").
    if (!(*capacity_ > 0 && *capacity_ <= kMaxShownCapacity)) capacity_.reset();
  }

  index_lanes();
  stack_memory();
  compute_gaps_and_summary();
  index_partners();
  read_mesh();
  index_groups();
}

void TraceView::index_lanes() {
  lanes_.assign(static_cast<size_t>(num_ranks_) * trace::kNumLanes, {});
  for (int i = 0; i < static_cast<int>(trace_.events.size()); ++i) {
    const Event& e = trace_.events[i];
    if (e.rank < 0 || static_cast<int>(e.lane) >= trace::kNumLanes) continue;
    lanes_[e.rank * trace::kNumLanes + static_cast<int>(e.lane)].events.push_back(i);
  }
  for (LaneIndex& lane : lanes_) {
    std::stable_sort(lane.events.begin(), lane.events.end(),
                     [&](int a, int b) { return trace_.events[a].start < trace_.events[b].start; });
    double running = -std::numeric_limits<double>::infinity();
    lane.max_end.reserve(lane.events.size());
    lane.starts.reserve(lane.events.size());
    for (int i : lane.events) lane.starts.push_back(trace_.events[i].start);
    for (int i : lane.events)
      lane.max_end.push_back(running = std::max(running, trace_.events[i].end()));
    // split_key[k]: how much event k stands apart from what precedes it: its width, or the gap
    // before it. A dense block runs on while split_key < one pixel.
    const size_t n = lane.events.size();
    lane.split_key.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const double gap =
          k == 0 ? std::numeric_limits<double>::infinity() : lane.starts[k] - lane.max_end[k - 1];
      lane.split_key[k] = std::max(gap, trace_.events[lane.events[k]].dur);
    }
    for (size_t c = 0; c < n; c += LaneIndex::kChunk) {
      lane.chunk_max.push_back(*std::max_element(
          lane.split_key.begin() + c, lane.split_key.begin() + std::min(n, c + LaneIndex::kChunk)));
    }
  }
}

size_t TraceView::LaneIndex::first_split(size_t from, size_t to, double threshold) const {
  size_t k = from;
  // Finish the current chunk one by one, then skip whole chunks whose maximum is below threshold.
  for (; k < to && k % kChunk != 0; ++k) {
    if (split_key[k] >= threshold) return k;
  }
  while (k + kChunk <= to && chunk_max[k / kChunk] < threshold) k += kChunk;
  for (; k < to; ++k) {
    if (split_key[k] >= threshold) return k;
  }
  return to;
}

const std::vector<int>& TraceView::lane_events(int rank, Lane l) const {
  return lane(rank, l).events;
}

std::optional<double> TraceView::prediction(const std::string& key) const {
  const auto& md = trace_.metadata;
  if (!md.is_object() || !md.contains("predictions") || !md["predictions"].is_object()) return {};
  const auto& p = md["predictions"];
  if (!p.contains(key) || !p[key].is_number()) return {};
  return p[key].get<double>();
}

// ---- TraceView: queries
// --------------------------------------------------------------------------

std::vector<Block> TraceView::visible_blocks(int rank, Lane l, const TimeAxis& axis) const {
  std::vector<Block> out;
  if (rank < 0 || rank >= num_ranks_) return out;
  const LaneIndex& li = lane(rank, l);
  const double px = axis.seconds_per_pixel();
  // The first event that can be visible is the first whose running max end reaches t0.
  size_t i = std::lower_bound(li.max_end.begin(), li.max_end.end(), axis.t0) - li.max_end.begin();
  const size_t n = li.events.size();
  while (i < n) {
    const Event& e = trace_.events[li.events[i]];
    if (e.start > axis.t1) break;
    Block b{e.start, e.end(), li.events[i], 1};
    ++i;
    if (e.dur < px) {
      // A sub-pixel event starts a dense block. The following events join it while each is
      // narrower than a pixel and starts within a pixel of the block: the first that does not is
      // the first with split_key >= px, found with the per-chunk maxima in O(n / kChunk + kChunk).
      const size_t last =
          std::upper_bound(li.starts.begin() + i, li.starts.end(), axis.t1) - li.starts.begin();
      const size_t j = li.first_split(i, last, px);
      if (j > i) {
        b.count += static_cast<int>(j - i);
        b.end = std::max(b.end, li.max_end[j - 1]);
        i = j;
      }
    }
    if (b.end >= axis.t0) out.push_back(b);
  }
  return out;
}

int TraceView::event_at(int rank, Lane l, double t, double slack) const {
  if (rank < 0 || rank >= num_ranks_) return -1;
  const LaneIndex& li = lane(rank, l);
  // Events starting after t + slack cannot contain t; scan back from there.
  auto it = std::upper_bound(li.events.begin(), li.events.end(), t + slack,
                             [&](double v, int e) { return v < trace_.events[e].start; });
  int best = -1;
  double best_distance = std::numeric_limits<double>::infinity();
  for (auto k = it - li.events.begin() - 1; k >= 0; --k) {
    if (li.max_end[k] < t - slack) break;  // nothing earlier reaches t
    const Event& e = trace_.events[li.events[k]];
    const double d = t < e.start ? e.start - t : t > e.end() ? t - e.end() : 0;
    if (d <= slack && d < best_distance) {
      best = li.events[k];
      best_distance = d;
      if (d == 0) break;
    }
  }
  return best;
}

std::optional<std::pair<int, Lane>> LaneLayout::hit(double y, int num_ranks) const {
  for (int r = 0; r < num_ranks; ++r) {
    for (Lane l : {Lane::compute, Lane::comm}) {
      const double top = lane_top(r, l);
      if (y >= top && y < top + lane_height) return std::make_pair(r, l);
    }
  }
  return std::nullopt;
}

}  // namespace mgpu::viz

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
  summary_step_ = steps.size() > 1 ? std::optional<int>(*steps.rbegin()) : std::nullopt;
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

void TraceView::index_partners() {
  partner_group_.assign(trace_.events.size(), -1);
  // Collectives: every event with the same (group, seq) is a member of one collective call.
  std::map<std::pair<std::string, int64_t>, std::vector<int>> collectives;
  // Point-to-point: the k-th send from a to b (in time order) matches the k-th recv on b from a
  // (MPI's non-overtaking rule), per group.
  std::map<std::tuple<std::string, int, int>, std::pair<std::vector<int>, std::vector<int>>> p2p;
  for (int i = 0; i < static_cast<int>(trace_.events.size()); ++i) {
    const Event& e = trace_.events[i];
    const bool is_send = e.op == "send" || e.op == "isend";
    const bool is_recv = e.op == "recv" || e.op == "irecv";
    if ((is_send || is_recv) && e.peer >= 0) {
      auto& [sends, recvs] = p2p[{e.group, is_send ? e.rank : e.peer, is_send ? e.peer : e.rank}];
      (is_send ? sends : recvs).push_back(i);
    } else if (e.seq >= 0 && !e.op.empty()) {
      collectives[{e.group, e.seq}].push_back(i);
    }
  }
  auto by_start = [&](int a, int b) { return trace_.events[a].start < trace_.events[b].start; };
  for (auto& [key, pair] : p2p) {
    auto& [sends, recvs] = pair;
    std::stable_sort(sends.begin(), sends.end(), by_start);
    std::stable_sort(recvs.begin(), recvs.end(), by_start);
    for (size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      partner_group_[sends[k]] = partner_group_[recvs[k]] = static_cast<int>(groups_.size());
      groups_.push_back({sends[k], recvs[k]});
    }
  }
  for (auto& [key, members] : collectives) {
    for (int i : members) partner_group_[i] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(members));
  }
}

std::vector<int> TraceView::partners(int i) const {
  std::vector<int> out;
  if (i < 0 || i >= static_cast<int>(partner_group_.size()) || partner_group_[i] < 0) return out;
  for (int j : groups_[partner_group_[i]]) {
    if (j != i) out.push_back(j);
  }
  return out;
}

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

double TraceView::shown_start() const {
  if (summary_step_) return trace::analysis_window(trace_, *summary_step_).begin;
  return run_start_;
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

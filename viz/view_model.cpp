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

using trace::Event;
using trace::Lane;

// ---- TimeAxis
// ------------------------------------------------------------------------------------

void TimeAxis::fit(double start, double end, double margin_fraction) {
  if (!(end > start)) end = start + 1e-6;  // an empty or instantaneous trace still gets a scale
  const double margin = (end - start) * margin_fraction;
  t0 = start - margin;
  t1 = end + margin;
}

void TimeAxis::zoom(double factor, double anchor_px) {
  const double anchor_t = to_time(anchor_px);
  const double span = std::max((t1 - t0) / factor, 1e-12);  // never collapse to nothing
  const double frac = (anchor_px - x0) / width;
  t0 = anchor_t - frac * span;
  t1 = t0 + span;
}

void TimeAxis::pan(double dx_px) {
  const double dt = dx_px * seconds_per_pixel();
  t0 -= dt;
  t1 -= dt;
}

// ---- formatting
// ----------------------------------------------------------------------------------

namespace {
struct Unit {
  double scale;
  const char* name;
};
Unit unit_for(double magnitude) {
  if (magnitude < 1e-6) return {1e9, "ns"};
  if (magnitude < 1e-3) return {1e6, "us"};
  if (magnitude < 1) return {1e3, "ms"};
  return {1, "s"};
}
std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}
}  // namespace

std::string format_time(double seconds, double step) {
  if (seconds == 0) return "0";
  // The unit of ten steps: "2.5 us" rather than "2500 ns" for 0.5 us ticks.
  const Unit u = unit_for(std::abs(step) * 10);
  // Enough decimals to tell neighbouring ticks apart.
  const double step_in_unit = std::abs(step) * u.scale;
  const char* fmt = step_in_unit >= 1 ? "%.0f %s" : step_in_unit >= 0.1 ? "%.1f %s" : "%.2f %s";
  return printf_string(fmt, seconds * u.scale, u.name);
}

std::string format_duration(double seconds) {
  if (seconds == 0) return "0";
  const Unit u = unit_for(std::abs(seconds));
  const double v = seconds * u.scale;
  return printf_string(v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, u.name);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return printf_string(u == 0 ? "%.0f %s" : bytes >= 100 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
}

Ticks ruler_ticks(const TimeAxis& axis, double min_spacing_px) {
  Ticks ticks;
  const double min_step = min_spacing_px * axis.seconds_per_pixel();
  if (!(min_step > 0) || !std::isfinite(min_step)) return ticks;
  const double pow10 = std::pow(10.0, std::floor(std::log10(min_step)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    ticks.step = m * pow10;
    if (ticks.step >= min_step) break;
  }
  for (double k = std::ceil((axis.t0 - axis.origin) / ticks.step);; k += 1) {
    double rel = k * ticks.step;
    if (std::abs(rel) < ticks.step * 1e-9) rel = 0.0;
    const double t = axis.origin + rel;
    if (t > axis.t1) break;
    ticks.times.push_back(t);
  }
  return ticks;
}

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
    // The "theory" profile has no device memory (0): no capacity rather than "peak 6 MiB / 0 B".
    if (*capacity_ <= 0) capacity_.reset();
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
  for (int r = 0; r < num_ranks_; ++r) {
    // Bubbles: the holes between busy intervals of the compute lane, inside the run window.
    // The lane index is already sorted by start: one pass, no re-sorting of the whole trace.
    double cursor = run_start_;
    for (int i : lane(r, Lane::compute).events) {
      const Event& e = trace_.events[i];
      if (e.dur <= 0) continue;
      if (e.start - cursor > min_gap) gaps_[r].push_back({cursor, e.start});
      cursor = std::max(cursor, e.end());
    }
    if (run_end_ - cursor > min_gap) gaps_[r].push_back({cursor, run_end_});

    RankSummary& s = summary_[r];
    if (r < static_cast<int>(analysis.ranks.size())) {
      const trace::RankSummary& a = analysis.ranks[r];
      s.busy = a.busy;
      s.comm = a.comm;
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

std::optional<double> TraceView::prediction(const std::string& key) const {
  const auto& md = trace_.metadata;
  if (!md.is_object() || !md.contains("predictions") || !md["predictions"].is_object()) return {};
  const auto& p = md["predictions"];
  if (!p.contains(key) || !p[key].is_number()) return {};
  return p[key].get<double>();
}

// ---- TraceView: the mesh and its groups
// ----------------------------------------------------------

bool TraceView::is_pipeline() const {
  const auto& md = trace_.metadata;
  if (!md.is_object() || !md.contains("config") || !md["config"].is_object()) return false;
  const auto& config = md["config"];
  if (!config.contains("schedule")) return false;
  const auto pp = config.find("pp");  // the pipeline lesson's stages are its ranks
  return pp == config.end() || !pp->is_number_integer() || pp->get<int64_t>() > 1;
}

void TraceView::read_mesh() {
  const auto& md = trace_.metadata;
  if (!md.is_object() || !md.contains("config") || !md["config"].is_object()) return;
  const auto& config = md["config"];
  // An axis is 1 when absent, and 0 (no mesh) when it is not a whole number of ranks in the trace.
  auto axis = [&](const char* name) -> int {
    if (!config.contains(name)) return 1;
    const auto& v = config[name];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > num_ranks_) return 0;
    return static_cast<int>(v.get<int64_t>());
  };
  const parallel::MeshShape shape{
      .tp = axis("tp"), .cp = axis("cp"), .dp = axis("dp"), .pp = axis("pp")};
  // A mesh that does not cover the trace's ranks would put wrong coordinates on the rows.
  int64_t ranks = 1;
  for (parallel::Axis a : parallel::kAxes) {
    ranks *= shape.size(a);  // both factors <= num_ranks_: no overflow
    if (ranks == 0 || ranks > num_ranks_) return;
  }
  if (ranks == num_ranks_ && ranks > 1) mesh_ = shape;
}

std::string TraceView::rank_label(int rank) const {
  if (!mesh_ || rank < 0 || rank >= num_ranks_) return fmt::format("GPU {}", rank);
  const std::array<int, 4> coords = parallel::mesh_coords(*mesh_, rank);
  std::vector<std::string> where;
  // Outer axes first, as the hybrid lesson prints them: "dp1 pp0 tp1".
  for (parallel::Axis a :
       {parallel::Axis::dp, parallel::Axis::pp, parallel::Axis::cp, parallel::Axis::tp}) {
    if (mesh_->size(a) > 1)
      where.push_back(fmt::format("{}{}", parallel::axis_name(a), coords[static_cast<int>(a)]));
  }
  return fmt::format("GPU {}  {}", rank, fmt::join(where, " "));
}

void TraceView::index_groups() {
  std::set<std::string> names;
  for (const Event& e : trace_.events)
    if (!e.group.empty()) names.insert(e.group);
  group_names_.assign(names.begin(), names.end());
  group_members_.assign(group_names_.size(), {});
  group_ranks_.assign(group_names_.size(), {});
  group_spans_.assign(group_names_.size(), {});
  event_group_.assign(trace_.events.size(), -1);
  for (int r = 0; r < num_ranks_; ++r) {
    for (Lane l : {Lane::compute, Lane::comm, Lane::step}) {
      for (int i : lane(r, l).events) {
        const int g = group_id(trace_.events[i].group);
        if (g < 0) continue;
        event_group_[i] = g;
        group_members_[g].push_back(i);
        group_spans_[g].push_back({trace_.events[i].start, trace_.events[i].end(), r, l, i});
        if (group_ranks_[g].empty() || group_ranks_[g].back() != r) group_ranks_[g].push_back(r);
      }
    }
  }
}

int TraceView::group_id(const std::string& group) const {
  const auto it = std::lower_bound(group_names_.begin(), group_names_.end(), group);
  return it != group_names_.end() && *it == group ? static_cast<int>(it - group_names_.begin())
                                                  : -1;
}

const std::vector<int>& TraceView::group_events(const std::string& group) const {
  static const std::vector<int> none;
  const int g = group_id(group);
  return g < 0 ? none : group_members_[g];
}

const std::vector<TraceView::Span>& TraceView::group_spans(const std::string& group) const {
  static const std::vector<Span> none;
  const int g = group_id(group);
  return g < 0 ? none : group_spans_[g];
}

bool TraceView::in_group(int i, const std::string& group) const {
  if (i < 0 || i >= static_cast<int>(event_group_.size()) || event_group_[i] < 0) return false;
  return group_names_[event_group_[i]] == group;
}

const std::vector<int>& TraceView::group_ranks(const std::string& group) const {
  static const std::vector<int> none;
  const int g = group_id(group);
  return g < 0 ? none : group_ranks_[g];
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

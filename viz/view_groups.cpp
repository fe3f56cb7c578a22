// What a trace says about its device mesh and communication groups: the row labels ("GPU 5  dp1
// pp0 tp1"), whether it is a pipeline (idle time is then a bubble), and each group's events,
// spans and member ranks for the highlight.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "viz/view_model.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

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

}  // namespace mgpu::viz

// Mesh construction: one Comm::split per axis. Ranks that agree on every coordinate except the
// axis's share a color (the index of their group); the key is their coordinate on the axis, so
// group rank == mesh coordinate.
#include "core/parallel/mesh.h"

#include <stdexcept>

#include <fmt/format.h>

namespace mgpu::parallel {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp:
      return "tp";
    case Axis::cp:
      return "cp";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
    case Axis::ep:
      return "ep";
    case Axis::edp:
      return "edp";
  }
  return "?";
}

int MeshShape::size(Axis axis) const {
  switch (axis) {
    case Axis::tp:
      return tp;
    case Axis::cp:
      return cp;
    case Axis::dp:
      return dp;
    case Axis::pp:
      return pp;
    case Axis::ep:
      return ep;
    case Axis::edp:
      return ep > 0 ? dp / ep : 0;
  }
  return 0;
}

std::string MeshShape::describe() const {
  const std::string experts = ep > 1 ? fmt::format(" ep={}", ep) : "";
  return fmt::format("tp={} cp={} dp={} pp={}{}", tp, cp, dp, pp, experts);
}

void MeshShape::validate(int world_size) const {
  for (Axis axis : kAxes)
    if (size(axis) <= 0)
      throw std::invalid_argument(fmt::format(
          "mesh {}: axis {} has size {}, every axis needs at least 1 rank (use 1 for an axis "
          "you do not split)",
          describe(), axis_name(axis), size(axis)));
  if (ep <= 0 || dp % ep != 0) {
    std::string divisors;
    for (int d = 1; d <= dp; ++d)
      if (dp % d == 0) divisors += fmt::format("{}{}", divisors.empty() ? "" : ", ", d);
    throw std::invalid_argument(fmt::format(
        "mesh {}: ep={} does not divide dp={}; the expert-parallel ranks are carved out of the "
        "data-parallel ones (ep = one of {})",
        describe(), ep, dp, divisors));
  }
  if (static_cast<int64_t>(tp) * cp * dp * pp != world_size)
    throw std::invalid_argument(
        fmt::format("mesh {} holds {} ranks but the world has {}: the axis sizes must multiply "
                    "to {} (e.g. tp={} or tp=1 dp={})",
                    describe(), static_cast<int64_t>(tp) * cp * dp * pp, world_size, world_size,
                    world_size, world_size));
}

std::array<int, 4> mesh_coords(const MeshShape& shape, int world_rank) {
  std::array<int, 4> c{};
  for (Axis axis : kAxes) {
    c[static_cast<int>(axis)] = world_rank % shape.size(axis);
    world_rank /= shape.size(axis);
  }
  return c;
}

int mesh_rank(const MeshShape& shape, const std::array<int, 4>& coords) {
  int rank = 0;
  for (int i = 3; i >= 0; --i) rank = rank * shape.size(kAxes[i]) + coords[i];
  return rank;
}

namespace {
// The group of `axis` this rank belongs to: its other coordinates, flattened (tp fastest).
int group_index(const MeshShape& shape, const std::array<int, 4>& coords, Axis axis) {
  int index = 0;
  for (int i = 3; i >= 0; --i)
    if (kAxes[i] != axis) index = index * shape.size(kAxes[i]) + coords[i];
  return index;
}

// The coordinates of the member of this rank's `axis` group whose coordinate on it is `c`: for
// ep and edp, the dp coordinate d = edp_index * ep + ep_index with the other part kept.
std::array<int, 4> member_coords(const MeshShape& shape, std::array<int, 4> at, Axis axis, int c) {
  int& d = at[static_cast<int>(Axis::dp)];
  if (axis == Axis::ep)
    d = d / shape.ep * shape.ep + c;
  else if (axis == Axis::edp)
    d = c * shape.ep + d % shape.ep;
  else
    at[static_cast<int>(axis)] = c;
  return at;
}

// The index of this rank's `axis` group among all groups of that axis (its split color): its
// other coordinates flattened, tp fastest. For ep they are tp, cp, the edp index and pp; for
// edp, tp, cp, the ep index and pp.
int group_color(const MeshShape& shape, std::array<int, 4> coords, Axis axis) {
  if (axis != Axis::ep && axis != Axis::edp) return group_index(shape, coords, axis);
  MeshShape other = shape;
  int& d = coords[static_cast<int>(Axis::dp)];
  other.dp = axis == Axis::ep ? shape.size(Axis::edp) : shape.ep;
  d = axis == Axis::ep ? d / shape.ep : d % shape.ep;
  return mesh_rank(other, coords);
}
}  // namespace

int Mesh::coord(Axis axis) const {
  const int d = coords_[static_cast<int>(Axis::dp)];
  if (axis == Axis::ep) return d % shape_.ep;
  if (axis == Axis::edp) return d / shape_.ep;
  return coords_[static_cast<int>(axis)];
}

comm::Comm& Mesh::group(Axis axis) const {
  const auto& g = groups_[static_cast<int>(axis)];
  return g ? *g : *groups_[static_cast<int>(Axis::dp)];  // edp with ep = 1: the dp group
}

Mesh::Mesh(comm::Comm& world, MeshShape shape, const MeshGroupFactory& make_group) : shape_(shape) {
  shape_.validate(world.size());
  coords_ = mesh_coords(shape_, world.rank());
  auto build = [&](Axis axis) {
    const int color = group_color(shape_, coords_, axis);
    const std::string name = fmt::format("{}{}", axis_name(axis), color);
    if (!make_group) return world.split(color, coord(axis), name);
    std::vector<int> members;
    for (int c = 0; c < shape_.size(axis); ++c)
      members.push_back(
          world.world_rank(mesh_rank(shape_, member_coords(shape_, coords_, axis, c))));
    return make_group(axis, members, coord(axis), name);
  };
  for (Axis axis : kAxes) groups_[static_cast<int>(axis)] = build(axis);
  // With ep = 1 the edp group would be the dp group again: it is not split a second time.
  groups_[static_cast<int>(Axis::ep)] = build(Axis::ep);
  if (shape_.ep > 1) groups_[static_cast<int>(Axis::edp)] = build(Axis::edp);
  auto stage_neighbour = [&](int offset) {
    std::array<int, 4> c = coords_;
    c[static_cast<int>(Axis::pp)] += offset;
    if (c[static_cast<int>(Axis::pp)] < 0 || c[static_cast<int>(Axis::pp)] >= shape_.pp) return -1;
    return world.world_rank(mesh_rank(shape_, c));
  };
  pp_prev_ = stage_neighbour(-1);
  pp_next_ = stage_neighbour(+1);
}

}  // namespace mgpu::parallel

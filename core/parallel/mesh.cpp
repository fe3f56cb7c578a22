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
  }
  return 0;
}

std::string MeshShape::describe() const {
  return fmt::format("tp={} cp={} dp={} pp={}", tp, cp, dp, pp);
}

void MeshShape::validate(int world_size) const {
  for (Axis axis : kAxes)
    if (size(axis) <= 0)
      throw std::invalid_argument(fmt::format(
          "mesh {}: axis {} has size {}, every axis needs at least 1 rank (use 1 for an axis "
          "you do not split)",
          describe(), axis_name(axis), size(axis)));
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
}  // namespace

Mesh::Mesh(comm::Comm& world, MeshShape shape, const MeshGroupFactory& make_group) : shape_(shape) {
  shape_.validate(world.size());
  coords_ = mesh_coords(shape_, world.rank());
  for (Axis axis : kAxes) {
    const int color = group_index(shape_, coords_, axis);
    const std::string name = fmt::format("{}{}", axis_name(axis), color);
    if (!make_group) {
      groups_[static_cast<int>(axis)] = world.split(color, coord(axis), name);
      continue;
    }
    std::vector<int> members;
    for (int c = 0; c < shape_.size(axis); ++c) {
      std::array<int, 4> at = coords_;
      at[static_cast<int>(axis)] = c;
      members.push_back(world.world_rank(mesh_rank(shape_, at)));
    }
    groups_[static_cast<int>(axis)] = make_group(axis, members, coord(axis), name);
  }
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

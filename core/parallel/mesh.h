// The device mesh: the world's ranks arranged on four named axes, tp x cp x dp x pp, with tp
// varying fastest (as in Megatron), so the ranks of one tensor-parallel group are neighbours -
// on a real machine, GPUs of one node joined by the fast link. Each rank gets its coordinates,
// one group Comm per axis (named "tp0", "dp1", ... in traces and errors) and its pipeline
// neighbours. The mesh is built once per run; paradigms take their groups from it and nothing
// else calls Comm::split.
//
// Experts (mixture of experts) are split over `ep` ranks carved out of the data-parallel ones, as
// in Megatron-Core: dp coordinate d = edp_index * ep + ep_index. Two more groups, both inside a
// dp group: `ep` (the ranks that split one copy of the experts: same d / ep) and `edp` (the
// expert-data-parallel ranks holding the same experts, which average their gradients: same
// d % ep), named "ep0", "edp1". With ep = 1 the edp group is the dp group itself.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"

namespace mgpu::parallel {

// The four axes of coordinates (kAxes), then the two expert groups carved out of dp.
enum class Axis { tp = 0, cp = 1, dp = 2, pp = 3, ep = 4, edp = 5 };
inline constexpr std::array<Axis, 4> kAxes = {Axis::tp, Axis::cp, Axis::dp, Axis::pp};
inline constexpr std::array<Axis, 2> kExpertAxes = {Axis::ep, Axis::edp};
const char* axis_name(Axis axis);  // "tp", "cp", "dp", "pp", "ep", "edp"

struct MeshShape {
  int tp = 1, cp = 1, dp = 1, pp = 1;
  int ep = 1;                 // expert-parallel ranks within each dp group; divides dp
  int size(Axis axis) const;  // edp: dp / ep
  int ranks() const { return tp * cp * dp * pp; }
  std::string describe() const;  // "tp=2 cp=1 dp=4 pp=1", then " ep=2" when ep > 1
  // Throws std::invalid_argument with one line when an axis is not positive, ep does not divide
  // dp, or the product is not `world_size` (the line names settings that work).
  void validate(int world_size) const;
};

// A rank's coordinates on the mesh, and back (tp fastest, then cp, dp, pp).
std::array<int, 4> mesh_coords(const MeshShape& shape, int world_rank);
int mesh_rank(const MeshShape& shape, const std::array<int, 4>& coords);

// Builds the group of `axis` from its members (world ranks, ordered by their coordinate on the
// axis) and this rank's index among them. For a world whose ranks are not all present: the
// planner's representative simulation (core/plan/simulate.cpp) runs one rank per pipeline stage,
// a tp, cp or dp group's other members are implied mirrors of it, so there is nobody to
// Comm::split with; it passes a factory that builds those groups itself.
using MeshGroupFactory = std::function<std::unique_ptr<comm::Comm>(
    Axis axis, const std::vector<int>& members, int my_index, const std::string& name)>;

class Mesh {
 public:
  // Collective over `world` (every rank calls it, in the same order as its other collectives).
  // With `make_group`, it builds the groups instead of Comm::split.
  Mesh(comm::Comm& world, MeshShape shape, const MeshGroupFactory& make_group = {});

  const MeshShape& shape() const { return shape_; }
  // ep: d % ep; edp: d / ep (d = this rank's dp coordinate).
  int coord(Axis axis) const;
  // The ranks that differ from this one only along `axis`, ordered by their coordinate on it.
  // ep and edp: the ranks that differ only in that part of the dp coordinate.
  comm::Comm& group(Axis axis) const;
  // World ranks of the previous / next pipeline stage (same tp, cp, dp), or -1 at the ends.
  int pp_prev() const { return pp_prev_; }
  int pp_next() const { return pp_next_; }

 private:
  MeshShape shape_;
  std::array<int, 4> coords_{};
  std::array<std::unique_ptr<comm::Comm>, 6> groups_;  // edp's is null when ep = 1 (dp's)
  int pp_prev_ = -1, pp_next_ = -1;
};

}  // namespace mgpu::parallel

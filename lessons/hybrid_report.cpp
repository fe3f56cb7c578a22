// The hybrid lesson's report (see hybrid_report.h).
#include "lessons/hybrid_report.h"

#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/simulate.h"
#include "lessons/exercise_views.h"
#include "lessons/training.h"

namespace mgpu::lessons {

using parallel::Axis;

// "dp1 pp0 tp1" (and " cp1" when the mesh has a cp axis): who rank r is on the mesh.
std::string coord_label(const parallel::MeshShape& shape, int r) {
  const auto c = parallel::mesh_coords(shape, r);
  return fmt::format("dp{} pp{} tp{}{}", c[int(Axis::dp)], c[int(Axis::pp)], c[int(Axis::tp)],
                     shape.cp > 1 ? fmt::format(" cp{}", c[int(Axis::cp)]) : "");
}

// "GPU 5  dp1 pp0 tp1" for every rank, then each axis's groups by their members.
// Also says which groups cross nodes of the profile (`per_node` GPUs each): their collectives
// ride the slower link between nodes.
void print_mesh(std::ostream& out, const parallel::MeshShape& shape,
                const HardwareProfile& profile) {
  fmt::print(out, "mesh:   {} (tp fastest: a tp group is neighbouring GPUs)\n", shape.describe());
  for (int r = 0; r < shape.ranks(); ++r) {
    fmt::print(out, "  GPU {:<2} {}\n", r, coord_label(shape, r));
  }
  const int per_node = std::max(1, profile.ranks_per_node);
  const bool several_nodes = shape.ranks() > per_node;
  for (Axis axis : {Axis::tp, Axis::cp, Axis::pp, Axis::dp}) {
    if (axis == Axis::cp && shape.cp == 1) continue;
    std::map<int, std::vector<int>> groups;  // lowest member -> members
    for (int r = 0; r < shape.ranks(); ++r) {
      auto c = parallel::mesh_coords(shape, r);
      c[int(axis)] = 0;
      groups[parallel::mesh_rank(shape, c)].push_back(r);
    }
    std::vector<std::string> members;
    int crossing = 0;
    for (const auto& [first, ranks] : groups) {
      const bool crosses = ranks.front() / per_node != ranks.back() / per_node;
      crossing += crosses ? 1 : 0;
      members.push_back(fmt::format("{{{}}}{}", fmt::join(ranks, ","), crosses ? "*" : ""));
    }
    fmt::print(out, "  {} groups: {}\n", parallel::axis_name(axis), fmt::join(members, " "));
    if (axis == Axis::tp && crossing > 0)
      fmt::print(out,
                 "  {} of {} tp groups cross nodes ({} GPUs per node on {}): their 4 all-reduces "
                 "per layer ride {} instead of {}\n",
                 crossing, groups.size(), per_node, profile.name, profile.inter_node.name,
                 profile.intra_node.name);
  }
  if (several_nodes)
    fmt::print(out, "  (* crosses nodes: {} GPUs per node on {}, {} between them)\n", per_node,
               profile.name, profile.inter_node.name);
  else
    fmt::print(out, "  every group is inside one node of {} ({} GPUs per node, {})\n", profile.name,
               per_node, profile.intra_node.name);
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

// MoE blocks among pipeline stage s's layers (0 for a dense model).
int64_t moe_blocks_of_stage(const GPTConfig& cfg, int stages, int s) {
  const auto range = pipeline::partition_layers(cfg.layers, stages).ranges[s];
  int64_t n = 0;
  for (int i = range.first; i < range.second; ++i) n += cfg.is_moe_block(i) ? 1 : 0;
  return n;
}

// ---- the pipeline bubble, measured (the bubble-accounting seam) beside the schedule's formula
void print_bubbles(std::ostream& out, const HybridRun& run) {
  const int P = run.mesh.pp, M = run.h.microbatches, chunks = run.h.virtual_stages;
  const std::vector<double> bubble = measured_bubble_fractions(run.trace, run.step);
  const double theory = pipeline::bubble_fraction_theory(run.h.schedule, P, M, chunks);
  fmt::print(out, "\nbubble per GPU, step {} (idle / step time), theory {} = {}:\n", run.step + 1,
             pipeline::bubble_formula(run.h.schedule, P, M, chunks), percent(theory));
  fmt::print(out,
             "  (measured by {}; the formula assumes equal stages that never wait for\n"
             "   communication: here stage 0 also embeds, stage {} computes the loss, and the tp\n"
             "   all-reduces and the dp all-reduce take time too)\n",
             bubble_accounting_credit(), P - 1);
  for (int r = 0; r < run.mesh.ranks() && r < int(bubble.size()); ++r)
    fmt::print(out, "  GPU {:<2} {:>6}\n", r, percent(bubble[r]));
}

}  // namespace mgpu::lessons

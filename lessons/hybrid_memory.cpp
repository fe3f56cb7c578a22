// The hybrid lesson's memory report: each GPU's allocator peaks by category, then each pipeline
// stage's model states by formula (theory::stage_parameters), divided by d under ZeRO.
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/pipeline/schedule.h"
#include "core/theory/mesh_traffic.h"
#include "lessons/hybrid_report.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

// What the model-state formula divides by d under ZeRO over dp (empty without it).
std::string zero_shards_note(int zero, int dp) {
  if (zero == 0) return {};
  static constexpr const char* kSharded[] = {"", "", "optimizer state and gradients",
                                             "optimizer state, gradients and parameters"};
  if (dp == 1)
    return fmt::format(" / d (ZeRO-{} over dp 1 shards nothing: this rank owns every chunk)", zero);
  if (zero == 1) return fmt::format(" / d (ZeRO-1: each of the {} dp ranks keeps its chunk)", dp);
  return fmt::format(
      " / d (ZeRO-{}: each of the {} dp ranks keeps its chunk of the {}{})", zero, dp,
      kSharded[zero],
      zero >= 2 ? "; during a step the stage's whole gradients (and, ZeRO-3, parameters) are "
                  "comm buffers"
                : "");
}

// theory::stage_parameters as a formula: GPT-2's in symbols, another block's with its numbers
// (R replicated and S tp-sharded parameters per block, theory::block_parameters).
std::string stage_formula(const GPTConfig& cfg) {
  if (cfg.style.is_gpt2()) return "[s=0](V+T)C + L_s(6C + (12C^2+7C)/t) + [s=P-1](V+2)C";
  const theory::BlockParameters block = theory::block_parameters(cfg);
  return fmt::format("[s=0]{}C + L_s({} + {}/t) + [s=P-1](VC + {})", cfg.rope() ? "V" : "(V+T)",
                     with_commas(block.replicated), with_commas(block.sharded),
                     theory::norm_parameters(cfg));
}
}  // namespace

// ---- memory per rank: the allocator's peaks, then the model states by formula
// (theory::stage_parameters): stage s holds its layers' tp slices and replicated parts, plus the
// embeddings (stage 0) and the head (the last stage).
void print_memory(std::ostream& out, const HybridRun& run) {
  const CommonOptions& c = run.c;
  const parallel::MeshShape& mesh = run.mesh;
  fmt::print(out,
             "\npeak memory per GPU by category (allocator, after building the model):\n  {:<14}",
             "GPU");
  for (int k = 0; k < kNumMemCategories; ++k)
    fmt::print(out, "{:>16}", category_name(static_cast<MemCategory>(k)));
  fmt::print(out, "{:>16}\n", "total");
  for (int r = 0; r < mesh.ranks(); ++r) {
    fmt::print(out, "  {:<14}", fmt::format("{} {}", r, coord_label(mesh, r)));
    const MemoryStats& memory = run.ranks[r].memory;
    for (int64_t bytes : memory.peak) fmt::print(out, "{:>16}", format_bytes(bytes));
    fmt::print(out, "{:>16}\n", format_bytes(memory.peak_total));
  }
  const theory::StateBytes b = run.state_bytes();
  const bool mixed = run.cfg.dtype != DType::f32;
  fmt::print(out,
             "model states by formula: P_s = {} parameters, x {} B weights ({}), 4 B gradients, "
             "{} B {} state{}{}:\n",
             stage_formula(run.cfg), b.params, c.precision, b.optimizer, c.optimizer,
             mixed ? " (fp32 master 4 + m 4 + v 4)" : "", zero_shards_note(run.h.zero, mesh.dp));
  const GPTConfig& cfg = run.cfg;
  const int64_t C = cfg.dim, E = cfg.experts;
  // An MoE block: its router and its E/ep whole experts in place of the MLP's sharded part over t
  // and its replicated projection bias (GPT-2: (8C^2+4C)/t + C).
  const int64_t mlp_replicated = cfg.style.bias ? C : 0;
  const int64_t mlp_sharded = theory::dense_mlp_parameters(cfg) - mlp_replicated;
  const int64_t moe_instead_of_mlp = E > 0 ? theory::moe_mlp_parameters(cfg, E / mesh.ep) -
                                                 (mlp_sharded / mesh.tp + mlp_replicated)
                                           : 0;
  if (E > 0 && !cfg.style.is_gpt2())
    fmt::print(out,
               "  (each MoE block: + E C router + E/ep experts of {} parameters - the MLP's {}/t "
               "+ {} = {} parameters)\n",
               with_commas(theory::moe_mlp_parameters(cfg, 1) - theory::moe_mlp_parameters(cfg, 0)),
               with_commas(mlp_sharded), mlp_replicated, with_commas(moe_instead_of_mlp));
  else if (E > 0)
    fmt::print(out,
               "  (each MoE block: + E C router + E/ep x (2HC + H + C) experts - the MLP's "
               "(8C^2+4C)/t + C = {} parameters)\n",
               with_commas(moe_instead_of_mlp));
  const int P = mesh.pp;
  const pipeline::LayerPartition layers = pipeline::partition_layers(cfg.layers, P);
  for (int s = 0; s < P; ++s) {
    const int64_t L = layers.ranges[s].second - layers.ranges[s].first;
    int64_t params = theory::stage_parameters(cfg, L, mesh.tp, s == 0, s == P - 1);
    params += moe_blocks_of_stage(cfg, P, s) * moe_instead_of_mlp;
    // ZeRO-k keeps 1/d of the first k of: optimizer state, gradients, parameters.
    auto kept = [&](int64_t bytes, int from_stage) {
      return format_bytes(bytes * params / (run.h.zero >= from_stage ? mesh.dp : 1));
    };
    fmt::print(out, "  stage {}: P_{} = {} -> {} + {} + {}\n", s, s, with_commas(params),
               kept(b.params, 3), kept(4, 2), kept(b.optimizer, 1));
  }
}

}  // namespace mgpu::lessons

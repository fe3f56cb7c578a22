// The hybrid lesson's report (see hybrid_report.h).
#include "lessons/hybrid_report.h"

#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/theory/collectives.h"
#include "core/theory/mesh_traffic.h"
#include "core/trace/analysis.h"
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

// Bytes each rank put on the wire in `step`, by the axis of the group ("tp0" -> tp).
std::vector<std::map<std::string, int64_t>> sent_by_axis(const trace::Trace& trace, int step,
                                                         int ranks) {
  std::vector<std::map<std::string, int64_t>> sent(ranks);
  const trace::Interval window = trace::analyze(trace, step).window;
  for (const trace::Event& e : trace.events) {
    if (e.lane != trace::Lane::comm || e.start < window.begin || e.start >= window.end) continue;
    if (e.rank < 0 || e.rank >= ranks || e.group.size() < 2) continue;
    sent[e.rank][e.group.substr(0, 2)] += e.sent_bytes;
  }
  return sent;
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

// ---- communication per group, measured beside the formulas (core/theory/mesh_traffic.h)

// One micro-batch's activation [B_micro, T, C] (cp: this rank's T/cp tokens) in elements: what
// pp sends, in the model's precision; the tp all-reduces sum partial results, which bf16/fp16
// sum in fp32 (4 B) to round once.
int64_t activation_elements(const HybridRun& run) {
  return int64_t{run.micro_b} * (run.c.seq / run.mesh.cp) * run.cfg.dim;
}

// --recompute full reruns each block's forward in backward, g's 2 all-reduces included.
int tp_all_reduces_per_layer(const CommonOptions& c) {
  return c.recompute == "full" ? 6 : 4;
}

// MoE blocks among pipeline stage s's layers (0 for a dense model).
int64_t moe_blocks_of_stage(const GPTConfig& cfg, int stages, int s) {
  const auto range = pipeline::partition_layers(cfg.layers, stages).ranges[s];
  int64_t n = 0;
  for (int i = range.first; i < range.second; ++i) n += cfg.is_moe_block(i) ? 1 : 0;
  return n;
}

// The tp formula's inputs for a rank of pipeline stage `stage` holding `layers` layers.
theory::TpTraffic tp_traffic(const HybridRun& run, int64_t layers, int stage) {
  const int dtype = static_cast<int>(dtype_size(run.cfg.dtype));
  return {.tp = run.mesh.tp,
          .layers = layers,
          .moe_layers = moe_blocks_of_stage(run.cfg, run.mesh.pp, stage),
          .microbatches = run.h.microbatches,
          .activation_elements = activation_elements(run),
          .tokens = int64_t{run.micro_b} * (run.c.seq / run.mesh.cp),
          .dim = run.cfg.dim,
          .activation_bytes_each = dtype,
          .sum_bytes_each = run.h.tp_sums == "activations" ? dtype : 4,
          .full_recompute = run.c.recompute == "full",
          .sequence_parallel = run.h.sp,
          .vocab_parallel_head = run.h.vocab_parallel_head,
          .first_stage = stage == 0,
          .last_stage = stage == run.mesh.pp - 1};
}

void print_traffic_formulas(std::ostream& out, const HybridRun& run) {
  const CommonOptions& c = run.c;
  const parallel::MeshShape& mesh = run.mesh;
  const int chunks = run.h.virtual_stages, weight_bytes = run.state_bytes().params;
  const std::string tokens = mesh.cp > 1 ? "(T/cp)" : "T";
  const int64_t act_elems = activation_elements(run);
  const int64_t act = act_elems * 4;
  const int64_t act_pp = act_elems / (run.h.sp ? mesh.tp : 1) * int64_t(dtype_size(run.cfg.dtype));
  fmt::print(
      out,
      "\nbytes each GPU sent in step {}, by group (measured from the trace | formula):\n"
      "  tp: {} all-reduces per layer per micro-batch{}, ring 2(t-1)/t x B_micro*{}*C*4 "
      "= {:.2f} x {}\n"
      "  pp: one activation forward + one gradient back per micro-batch and neighbour{}, "
      "B_micro*{}*C*{} = {}\n"
      "  dp: {}{}{}\n",
      run.step + 1, tp_all_reduces_per_layer(c),
      fmt::format(
          "{}{}",
          c.recompute == "full" ? " (2 fwd + 2 recomputed fwd + 2 bwd)" : " (2 fwd + 2 bwd)",
          run.cfg.experts > 0 ? ", half that in an MoE block (no MLP linears)" : ""),
      tokens, theory::ring_all_reduce_factor(mesh.tp), format_bytes(act),
      chunks > 1 ? fmt::format(" and chunk ({} chunks per stage: a micro-batch passes "
                               "every stage {} times)",
                               chunks, chunks)
                 : "",
      tokens, dtype_size(run.cfg.dtype), format_bytes(act_pp),
      run.h.zero >= 1
          ? fmt::format("ZeRO-{}: ring reduce-scatter of the stage's fp32 gradients + "
                        "all-gather of its {} B parameters once per step{}, (d-1)/d = {:.2f} "
                        "x (gradient + parameter bytes)",
                        run.h.zero, weight_bytes,
                        run.h.zero == 3 ? " (before the first micro-batch)" : "",
                        theory::ring_all_reduce_factor(mesh.dp) / 2)
          : fmt::format("ring all-reduce of the stage's gradients once per step, "
                        "2(d-1)/d = {:.2f} x gradient bytes",
                        theory::ring_all_reduce_factor(mesh.dp)),
      mesh.cp == 1
          ? std::string()
          : fmt::format("\n  cp: ring attention per layer and micro-batch: K|V blocks "
                        "B_micro*(T/cp)*2C/t, cp-1 hops forward ({}) and backward in {} B, cp "
                        "dK|dV hops in 4 B (fp32 accumulators); then 2(c-1)/c = {:.2f} x "
                        "gradient bytes (the cp all-reduce)",
                        c.recompute == "none" ? "once" : "twice: recompute reruns it", weight_bytes,
                        theory::ring_all_reduce_factor(mesh.cp)),
      c.precision == "fp16" ? "\n  (fp16: every group also all-reduces the loss scaler's "
                              "found-inf flag, 4 B, once per step)"
                            : "");
  if (run.h.sp)
    fmt::print(out,
               "  --sp: each all-reduce a reduce-scatter + all-gather, 2 more all-gathers per "
               "layer in backward, the head's input and the embedding's gradient gathered, the "
               "layernorm gradients all-reduced once; pp messages carry T/tp tokens\n");
  if (run.h.vocab_parallel_head)
    fmt::print(out,
               "  --vocab-parallel-head: per micro-batch, the last stage all-gathers 3 x 4 B per "
               "token and all-reduces the head's input gradient\n");
  if (run.h.tp_sums == "activations")
    fmt::print(out, "  --tp-sums activations: partial sums move in {} B, not 4 B\n",
               dtype_size(run.cfg.dtype));
}

void print_traffic(std::ostream& out, const HybridRun& run) {
  const CommonOptions& c = run.c;
  const parallel::MeshShape& mesh = run.mesh;
  const int M = run.h.microbatches, weight_bytes = run.state_bytes().params;
  const int64_t act_elems = activation_elements(run);
  const int64_t act_pp =
      act_elems / (run.h.sp ? run.mesh.tp : 1) * int64_t(dtype_size(run.cfg.dtype));
  // cp: ring attention's K|V block of one micro-batch, B_micro*(T/cp)*2C/t elements.
  const int64_t kv = int64_t{run.micro_b} * (c.seq / mesh.cp) * 2 * run.cfg.dim / mesh.tp;
  print_traffic_formulas(out, run);
  const auto sent = sent_by_axis(run.trace, run.step, mesh.ranks());
  for (int r = 0; r < mesh.ranks(); ++r) {
    const HybridRankStats& rank = run.ranks[r];
    const int s = parallel::mesh_coords(mesh, r)[int(Axis::pp)];
    const double tp_formula = theory::tp_bytes_sent(tp_traffic(run, rank.layers, s));
    const int64_t pp_formula =
        int64_t{M} * act_pp * theory::pipeline_sends(s, mesh.pp, run.h.virtual_stages);
    const double dp_formula =
        theory::dp_bytes_sent(mesh.dp, rank.gradient_bytes, weight_bytes, run.h.zero >= 1);
    const double cp_formula = theory::cp_bytes_sent(
        mesh.cp, rank.layers, M, kv, c.recompute != "none", weight_bytes, rank.gradient_bytes);
    auto get = [&](const char* axis) {
      auto it = sent[r].find(axis);
      return it == sent[r].end() ? int64_t{0} : it->second;
    };
    fmt::print(out, "  GPU {:<2} {}  tp {:>9} | {:>9}   pp {:>9} | {:>9}   dp {:>9} | {:>9}{}\n", r,
               coord_label(mesh, r), format_bytes(get("tp")),
               format_bytes(int64_t(tp_formula + 0.5)), format_bytes(get("pp")),
               format_bytes(pp_formula), format_bytes(get("dp")),
               format_bytes(int64_t(dp_formula + 0.5)),
               mesh.cp == 1 ? std::string()
                            : fmt::format("   cp {:>9} | {:>9}", format_bytes(get("cp")),
                                          format_bytes(int64_t(cp_formula + 0.5))));
  }
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
    for (int64_t bytes : run.ranks[r].peak) fmt::print(out, "{:>16}", format_bytes(bytes));
    fmt::print(out, "{:>16}\n", format_bytes(run.ranks[r].peak_total));
  }
  const theory::StateBytes b = run.state_bytes();
  const bool mixed = run.cfg.dtype != DType::f32;
  fmt::print(out,
             "model states by formula: P_s = [s=0](V+T)C + L_s(6C + (12C^2+7C)/t) + "
             "[s=P-1](V+2)C parameters, x {} B weights ({}), 4 B gradients, {} B {} state{}{}:\n",
             b.params, c.precision, b.optimizer, c.optimizer,
             mixed ? " (fp32 master 4 + m 4 + v 4)" : "", zero_shards_note(run.h.zero, mesh.dp));
  const GPTConfig& cfg = run.cfg;
  const int64_t C = cfg.dim, E = cfg.experts, H = cfg.expert_hidden_size();
  // An MoE block: its router and its E/ep whole experts in place of the MLP's (8C^2+4C)/t + C.
  const int64_t moe_instead_of_mlp =
      E > 0 ? theory::moe_mlp_parameters(C, E, H, E / mesh.ep) - ((8 * C * C + 4 * C) / mesh.tp + C)
            : 0;
  if (E > 0)
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

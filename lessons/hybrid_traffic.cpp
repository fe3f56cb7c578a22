// The hybrid lesson's bytes on the wire: what each GPU sent in the last step, by the axis of the
// group (tp, pp, dp, cp), measured from the trace beside core/theory/mesh_traffic.h's formulas.
#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/collectives.h"
#include "core/theory/mesh_traffic.h"
#include "core/trace/analysis.h"
#include "lessons/hybrid_report.h"
#include "lessons/training.h"

namespace mgpu::lessons {

using parallel::Axis;

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
                        "B_micro*(T/cp)*{}/t, cp-1 hops forward ({}) and backward in {} B, cp "
                        "dK|dV hops in 4 B (fp32 accumulators); then 2(c-1)/c = {:.2f} x "
                        "gradient bytes (the cp all-reduce)",
                        // grouped-query attention sends only the kv heads: 2 KV D per token
                        run.cfg.kv_head_count() == run.cfg.heads ? "2C" : "2*KV*D",
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
  // cp: ring attention's K|V block of one micro-batch, B_micro*(T/cp)*2*KV*D/t elements (2C/t
  // for multi-head attention; tp splits the kv heads).
  const int64_t kv = theory::cp_kv_block_elements(
      run.micro_b, c.seq / mesh.cp, run.cfg.kv_head_count() / mesh.tp, run.cfg.head_size());
  print_traffic_formulas(out, run);
  const auto sent = sent_by_axis(run.trace, run.step, mesh.ranks());
  for (int r = 0; r < mesh.ranks(); ++r) {
    const train::StageFigures& rank = run.ranks[r].stage.value();
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

}  // namespace mgpu::lessons

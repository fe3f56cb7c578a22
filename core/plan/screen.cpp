// The planner's screen (see search.h): formula estimates of a layout's step time and memory
// that only decide which layouts plan::simulate runs. The closed forms come from core/theory
// (ring all-reduce time, bytes per parameter, bubbles and micro-batches in flight) and
// core/memory/activations.h (kept activation bytes).
#include <algorithm>

#include "core/memory/activations.h"
#include "core/plan/search.h"
#include "core/theory/collectives.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"

namespace mgpu::plan {

namespace {

GPTConfig local_config(const GPTConfig& m, const Layout& l) {
  GPTConfig c = m;
  c.dtype = parse_precision(l.precision);
  c.recompute = parse_recompute(l.recompute);
  c.seq_len = m.seq_len / l.cp;
  return c;
}

// Ring all-reduce time of `bytes` over `n` members whose slowest hop is `link`.
double ring_all_reduce(double bytes, int n, const LinkSpec& link) {
  if (n <= 1) return 0;
  const double bw = link.bandwidth > 0 ? link.achieved_bandwidth() : 1e30;
  return theory::ring_all_reduce_seconds(bytes, n, bw, link.latency);
}

// The link a group of `n` members `stride` ranks apart crosses at its slowest hop.
const LinkSpec& group_link(const HardwareProfile& p, int n, int stride) {
  return int64_t{stride} * (n - 1) < p.ranks_per_node ? p.intra_node : p.inter_node;
}

// Seconds of one micro-batch through one stage: its layers' GEMMs and attention on the roofline
// (kernel_time), elementwise passes, recompute, the 4 tp all-reduces per layer, ring attention's
// hops, the LM head and the p2p sends. `c` is the rank's local config (local_config).
double micro_batch_seconds(const GPTConfig& model, const GPTConfig& c, const Layout& l,
                           const HardwareProfile& p) {
  const DType dtype = c.dtype;
  const double s = static_cast<double>(dtype_size(dtype));
  const double C = c.dim, T = c.seq_len, V = c.vocab, H = c.heads, tp = l.tp;
  const double rows = static_cast<double>(l.microbatch_size) * T;
  const int layers = c.layers / l.pp;
  auto gemm = [&](double m, double k, double n) {
    return p.kernel_time(KernelCost{.kind = KernelKind::gemm,
                                    .flops = 2 * m * k * n,
                                    .bytes = s * (m * k + k * n + m * n),
                                    .dtype = dtype,
                                    .m = m,
                                    .n = n,
                                    .k = k});
  };
  const double linears = gemm(rows, C, 3 * C / tp) + gemm(rows, C / tp, C) +
                         gemm(rows, C, 4 * C / tp) + gemm(rows, 4 * C / tp, C);
  const double attention =
      p.kernel_time(4 * rows * model.seq_len * C / tp,
                    4 * s * l.microbatch_size * (H / tp) * T * model.seq_len, dtype);
  const double elementwise = p.kernel_time(0, 20 * s * rows * C, dtype);
  const double forward = linears + attention + elementwise;
  const double recompute = l.recompute == "full"        ? forward
                           : l.recompute == "selective" ? attention
                                                        : 0;
  const double tp_comm = 4 * ring_all_reduce(rows * C * s, l.tp, group_link(p, l.tp, 1));
  // Ring attention: every block passes K and V (2 x its rows x C / tp) around the cp ring, forward
  // and twice in backward; counted as exposed (the screen does not model the overlap).
  const double cp_comm =
      l.cp > 1 ? 3 * (l.cp - 1) *
                     (group_link(p, l.cp, l.tp).latency +
                      2 * rows * C / tp * s /
                          std::max(group_link(p, l.cp, l.tp).achieved_bandwidth(), 1.0))
               : 0;
  const LinkSpec& pp_link = group_link(p, 2, l.tp * l.cp * l.dp);
  const double p2p =
      l.pp > 1 ? 2 * (pp_link.latency + rows * C * s / std::max(pp_link.achieved_bandwidth(), 1.0))
               : 0;
  // The vocabulary-parallel head computes V / tp of the logits.
  const double head = 3 * gemm(rows, C, l.vocab_parallel_head ? V / tp : V);
  return layers * (3 * forward + recompute + tp_comm + cp_comm) + head + p2p;
}

// Parameters of the largest stage, roughly: its blocks over tp plus the larger of the embeddings
// and the head.
double largest_stage_parameters(const GPTConfig& model, const GPTConfig& c, const Layout& l) {
  const double C = c.dim, V = c.vocab, tp = l.tp;
  const int layers = c.layers / l.pp;
  const double block_params = static_cast<double>(theory::block_parameters(c.dim));
  const double head = (l.vocab_parallel_head ? V / tp : V) * C + 2 * C;
  return layers * block_params / tp + std::max((V + model.seq_len) * C, head);
}

// Bytes of the largest stage: its model states (theory::model_state_bytes, AdamW; ZeRO-1 shards
// the optimizer over dp), the kept activations (activations.h) of the micro-batches in flight
// (theory::microbatches_in_flight), backward's workspace, the logits and the dp gradient buffer.
double stage_memory_bytes(const GPTConfig& model, const GPTConfig& c, const Layout& l,
                          double stage_params) {
  const double s = static_cast<double>(dtype_size(c.dtype));
  const double C = c.dim, T = c.seq_len, V = c.vocab, H = c.heads, tp = l.tp;
  const double rows = static_cast<double>(l.microbatch_size) * T;
  const int layers = c.layers / l.pp;
  const theory::StateBytes states = theory::model_state_bytes(int(s), "adamw");
  const double optimizer_bytes = states.optimizer / (l.zero == 1 ? double(l.dp) : 1.0);
  const double in_flight =
      theory::microbatches_in_flight(l.schedule, l.pp, l.virtual_stages, l.microbatches);
  // A block's kept bytes (activations.h) split over tp except ln1, res1, ln2, the output and the
  // fp32 layernorm statistics (Megatron TP without sequence parallelism; with it those are split
  // over tp too, Korthikanti et al. 2022); full recompute keeps only the output (1/tp under SP).
  // Under cp, ring attention keeps each local query row's probabilities against all T keys (cp
  // blocks of T/cp), where the local config's formula counts T/cp of them.
  const double cp_probabilities =
      l.recompute == "none" ? rows * s * H * (model.seq_len - c.seq_len) : 0.0;
  const double kept_whole =
      static_cast<double>(memory::block_kept_bytes(c, l.microbatch_size)) + cp_probabilities;
  const double replicated = l.recompute == "full" ? kept_whole : rows * (s * 4 * C + 16);
  const double kept = l.sp ? kept_whole / tp : replicated + (kept_whole - replicated) / tp;
  const memory::StepActivationBytes step = memory::step_activation_bytes(c, l.microbatch_size);
  const double logits = 2 * rows * (l.vocab_parallel_head ? V / tp : V) * 4;
  const double dp_buffer = l.dp > 1 ? 4 * stage_params : 0;  // the flat fp32 gradient all-reduce
  return stage_params * (s + states.grads + optimizer_bytes) + dp_buffer +
         in_flight * layers * kept + static_cast<double>(step.workspace) / tp + logits;
}

}  // namespace

// Rough on purpose: it only orders candidates and drops the hopeless ones; every figure shown
// comes from plan::simulate. Time: each stage's micro-batch (micro_batch_seconds); the pipeline
// takes (M + bubble) of those (theory::bubble_in_microbatches); then the dp gradient all-reduce
// (fp32 gradients) and the optimizer. Memory: the largest stage's states and activations
// (stage_memory_bytes).
Screen screen_layout(const GPTConfig& model, const Layout& l, const HardwareProfile& p) {
  const GPTConfig c = local_config(model, l);
  const double bubble = theory::bubble_in_microbatches(l.schedule, l.pp, l.virtual_stages);
  const double pipeline = (l.microbatches + bubble) * micro_batch_seconds(model, c, l, p);
  // DualPipe holds two copies: every stage keeps two stages' parameters (and their states).
  const double stage_params =
      (l.schedule == "dualpipe" ? 2 : 1) * largest_stage_parameters(model, c, l);
  const double dp_comm = ring_all_reduce(4 * stage_params, l.dp, group_link(p, l.dp, l.tp * l.cp));
  const double optimizer_step = p.kernel_time(0, 36 * stage_params, DType::f32);
  const double memory = stage_memory_bytes(model, c, l, stage_params);
  return {.step_seconds = pipeline + dp_comm + optimizer_step,
          .memory_bytes = static_cast<int64_t>(memory)};
}

}  // namespace mgpu::plan

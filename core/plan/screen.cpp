// The planner's screen (see search.h): formula figures of a layout that only decide which layouts
// plan::simulate runs. Here its step time, an estimate that orders; its memory is a lower bound
// of the peak (screen_memory.cpp). The closed forms come from core/theory (ring all-reduce time,
// bubbles). A model with experts adds its MoE blocks: experts at 1/ep of the stage's parameters,
// 4 all-to-alls per block and micro-batch.
#include <algorithm>
#include <functional>

#include "core/parallel/pipeline/schedule.h"
#include "core/plan/search.h"
#include "core/plan/search_internal.h"
#include "core/theory/collectives.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"

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

// One MoE exchange (dispatch or combine, or either's backward) of a rank's `tokens` x top_k
// routed rows of `width` values over the ep group under balanced routing: the (ep-1)/ep of them
// bound for other ranks (theory::moe_dispatch_sent_bytes_balanced), one message per peer.
double moe_exchange_seconds(int64_t tokens, int top_k, int64_t width, int dtype_bytes, int ep,
                            const LinkSpec& link) {
  if (ep <= 1) return 0;
  const double bw = link.bandwidth > 0 ? link.achieved_bandwidth() : 1e30;
  const double bytes = static_cast<double>(
      theory::moe_dispatch_sent_bytes_balanced(tokens, top_k, width, dtype_bytes, ep));
  return (ep - 1) * link.latency + bytes / bw;
}

// MoE blocks of the pipeline stage that has the most of them (a stage holds consecutive blocks,
// pipeline::partition_layers).
int most_moe_layers_per_stage(const GPTConfig& m, int pp) {
  if (m.experts <= 0) return 0;
  int most = 0;
  for (const auto& [begin, end] : pipeline::partition_layers(m.layers, pp).ranges) {
    int n = 0;
    for (int i = begin; i < end; ++i) n += m.is_moe_block(i) ? 1 : 0;
    most = std::max(most, n);
  }
  return most;
}

// Layers of the fullest stage (the first ones, when pp does not divide the layers).
int fullest_stage_layers(const GPTConfig& m, int pp) {
  return (m.layers + pp - 1) / pp;
}

// One MLP's two GEMMs on `rows` rows with `hidden` hidden units: fc C -> fc_width(hidden) (gate |
// up under SwiGLU, Shazeer 2020: three matrices) and proj hidden -> C.
double mlp_seconds(const GPTConfig& model, double rows, double hidden,
                   const std::function<double(double, double, double)>& gemm) {
  const double C = model.dim, fc = model.swiglu() ? 2 * hidden : hidden;
  return gemm(rows, C, fc) + gemm(rows, hidden, C);
}

// What an MoE block's MLP adds to one micro-batch on one stage, over the dense MLP it replaces:
// the router (C -> E), each of the rank's E/ep experts on its share of the rows x top_k routed
// rows (balanced), whole (experts are not tensor-split), in forward, backward (2x) and full
// recompute; and the 4 all-to-alls of the routed rows over the ep group (dispatch and combine,
// forward and backward), counted as exposed.
double moe_extra_seconds(const GPTConfig& model, const GPTConfig& c, const Layout& l,
                         const HardwareProfile& p,
                         const std::function<double(double, double, double)>& gemm) {
  const int moe_layers = most_moe_layers_per_stage(model, l.pp);
  if (moe_layers == 0) return 0;
  const double s = static_cast<double>(dtype_size(c.dtype));
  const double C = c.dim, E = model.experts, k = model.top_k,
               H = static_cast<double>(model.expert_hidden_size());
  const double rows = static_cast<double>(l.microbatch_size) * c.seq_len;
  const double local_experts = E / l.ep, rows_per_expert = rows * k * l.ep / E;
  const double dense_mlp =
      mlp_seconds(model, rows, static_cast<double>(model.ffn_hidden()) / l.tp, gemm);
  const double moe_mlp =
      gemm(rows, C, E) + local_experts * mlp_seconds(model, rows_per_expert, H, gemm);
  const double more = moe_mlp - dense_mlp;
  const double exchange =
      4 * moe_exchange_seconds(int64_t{l.microbatch_size} * c.seq_len, model.top_k, c.dim, int(s),
                               l.ep, group_link(p, l.ep, l.tp * l.cp));
  return moe_layers * (3 * more + (l.recompute == "full" ? more : 0) + exchange);
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
  const int layers = fullest_stage_layers(c, l.pp);
  auto gemm = [&](double m, double k, double n) {
    return p.kernel_time(KernelCost{.kind = KernelKind::gemm,
                                    .flops = 2 * m * k * n,
                                    .bytes = s * (m * k + k * n + m * n),
                                    .dtype = dtype,
                                    .m = m,
                                    .n = n,
                                    .k = k});
  };
  // qkv C -> (H + 2 KV) D (grouped-query attention: KV key and value heads), proj, the MLP.
  const double qkv = static_cast<double>(c.qkv_width());
  const double linears = gemm(rows, C, qkv / tp) + gemm(rows, C / tp, C) +
                         mlp_seconds(c, rows, static_cast<double>(c.ffn_hidden()) / tp, gemm);
  const double attention =
      p.kernel_time(4 * rows * model.seq_len * C / tp,
                    4 * s * l.microbatch_size * (H / tp) * T * model.seq_len, dtype);
  const double elementwise = p.kernel_time(0, 20 * s * rows * C, dtype);
  const double forward = linears + attention + elementwise;
  const double recompute = l.recompute == "full"        ? forward
                           : l.recompute == "selective" ? attention
                                                        : 0;
  const double tp_comm = 4 * ring_all_reduce(rows * C * s, l.tp, group_link(p, l.tp, 1));
  // Ring attention: every block passes its rows' K and V (theory::kv_bytes_per_token, over tp)
  // around the cp ring, forward and twice in backward; counted as exposed (the screen does not
  // model the overlap).
  const double kv_bytes =
      rows * static_cast<double>(theory::kv_bytes_per_token(c, static_cast<int>(s))) / tp;
  const double cp_comm =
      l.cp > 1 ? 3 * (l.cp - 1) *
                     (group_link(p, l.cp, l.tp).latency +
                      kv_bytes / std::max(group_link(p, l.cp, l.tp).achieved_bandwidth(), 1.0))
               : 0;
  // A micro-batch crosses each stage once per chunk: V times under interleaving (V x the
  // messages of 1F1B, the price of its smaller bubble), forward and backward.
  const LinkSpec& pp_link = group_link(p, 2, l.tp * l.cp * l.dp);
  const double p2p =
      l.pp > 1 ? 2 * std::max(1, l.virtual_stages) *
                     (pp_link.latency + rows * C * s / std::max(pp_link.achieved_bandwidth(), 1.0))
               : 0;
  // The vocabulary-parallel head computes V / tp of the logits.
  const double head = 3 * gemm(rows, C, l.vocab_parallel_head ? V / tp : V);
  const double dense = layers * (3 * forward + recompute + tp_comm + cp_comm) + head + p2p;
  return model.experts > 0 ? dense + moe_extra_seconds(model, c, l, p, gemm) : dense;
}

// Parameters of the largest stage, roughly: its blocks over tp plus the larger of the embeddings
// and the head (dense); an MoE block's router and its E/ep experts in place of the MLP (experts,
// averaged over the expert-data-parallel group instead of dp).
struct StageParameters {
  double dense = 0, experts = 0;
  double total() const { return dense + experts; }
};

StageParameters largest_stage_parameters(const GPTConfig& model, const GPTConfig& c,
                                         const Layout& l) {
  const double C = c.dim, V = c.vocab, tp = l.tp;
  const int layers = fullest_stage_layers(c, l.pp);
  const double block_params = static_cast<double>(theory::block_parameters(c).total());
  const double head =
      (l.vocab_parallel_head ? V / tp : V) * C + static_cast<double>(theory::norm_parameters(c));
  const double positions = c.rope() ? 0 : model.seq_len;  // RoPE has no position table
  StageParameters p{.dense = layers * block_params / tp + std::max((V + positions) * C, head)};
  const int moe_layers = most_moe_layers_per_stage(model, l.pp);
  if (moe_layers == 0) return p;
  // theory::moe_mlp_parameters with 0 experts counted is the router; with E/ep, mine too.
  const double router = double(theory::moe_mlp_parameters(model, 0));
  const double mine = double(theory::moe_mlp_parameters(model, model.experts / l.ep)) - router;
  // in place of the dense MLP
  p.dense += moe_layers * (router - double(theory::dense_mlp_parameters(model)) / tp);
  p.experts = moe_layers * mine;
  return p;
}

}  // namespace

// Rough on purpose: the time only orders candidates, the memory bound drops only what cannot fit;
// every figure shown comes from plan::simulate. Time: each stage's micro-batch
// (micro_batch_seconds); the pipeline takes (M + bubble) of those
// (theory::bubble_in_microbatches); then the dp gradient all-reduce (fp32 gradients) and the
// optimizer. Memory: detail::memory_at_least.
Screen screen_layout(const GPTConfig& model, const Layout& l, const HardwareProfile& p) {
  const GPTConfig c = local_config(model, l);
  const double bubble = theory::bubble_in_microbatches(l.schedule, l.pp, l.virtual_stages);
  const double pipeline = (l.microbatches + bubble) * micro_batch_seconds(model, c, l, p);
  // DualPipe holds two copies: every stage keeps two stages' parameters (and their states).
  const double copies = theory::traits(theory::schedule_kind(l.schedule)).bidirectional ? 2 : 1;
  const StageParameters params = largest_stage_parameters(model, c, l);
  const double stage_params = copies * params.total();
  // Dense gradients averaged over dp; expert gradients over the dp / ep ranks holding the same
  // experts (their members ep x tp x cp ranks apart).
  double dp_comm =
      ring_all_reduce(4 * copies * params.dense, l.dp, group_link(p, l.dp, l.tp * l.cp));
  if (params.experts > 0)
    dp_comm += ring_all_reduce(4 * copies * params.experts, l.dp / l.ep,
                               group_link(p, l.dp / l.ep, l.ep * l.tp * l.cp));
  const double optimizer_step = p.kernel_time(0, 36 * stage_params, DType::f32);
  return {.step_seconds = pipeline + dp_comm + optimizer_step,
          .memory_bytes = static_cast<int64_t>(detail::memory_at_least(model, c, l))};
}

}  // namespace mgpu::plan

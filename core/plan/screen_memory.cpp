// The planner's screen, its memory (search_internal.h: memory_at_least): a lower bound of a
// layout's simulated peak, so the screen drops only what cannot fit. Each term counts only what
// the engine certainly holds at one moment on one stage: the model states, and either the
// activations of the micro-batches in flight (at their peak) or the data-parallel gradient buffer
// (during the sync, after the backward); never both, and nothing it might free or reuse
// (backward's workspace, the optimizer's temporaries). The property test in
// tests/unit/test_plan_screen.cpp holds it under the simulated peak.
#include <algorithm>
#include <vector>

#include "core/memory/activations.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/plan/search_internal.h"
#include "core/theory/model_states.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::plan::detail {

namespace {

// What stage `stage` holds under the schedule's placement (pipeline/schedule.h, the engine's own
// functions): the layers of each of its chunks (DualPipe: one chunk per copy), whether it holds
// the first part (and the embeddings) and the last (and the head).
struct StageHolding {
  std::vector<int> layers;
  // per chunk (DualPipe: per copy), the unit of activations in flight (pipeline/simulate.h)
  std::vector<std::vector<int>> chunk_layers;
  bool embedding = false, head = false;
};

StageHolding stage_holding(const GPTConfig& model, const Layout& l, int stage) {
  const theory::ScheduleTraits t = theory::traits(theory::schedule_kind(l.schedule));
  const pipeline::Placement placement = t.bidirectional ? pipeline::Placement::bidirectional
                                        : t.v_shape     ? pipeline::Placement::v_shape
                                                        : pipeline::Placement::ring;
  const int chunks = t.bidirectional || t.v_shape ? 2 : std::max(1, l.virtual_stages);
  const int parts = pipeline::model_parts(placement, l.pp, chunks);
  const pipeline::LayerPartition partition = pipeline::partition_layers(model.layers, parts);
  StageHolding h;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int part = pipeline::virtual_stage(placement, l.pp, stage, chunk);
    h.chunk_layers.emplace_back();
    for (int layer = partition.ranges[part].first; layer < partition.ranges[part].second; ++layer) {
      h.layers.push_back(layer);
      h.chunk_layers.back().push_back(layer);
    }
    h.embedding |= part == 0;
    h.head |= part == parts - 1;
  }
  return h;
}

// Parameters of a stage (elements), each part at most what the engine holds: a block's weights
// over tp (its layernorms and row-parallel biases are whole: more); an MoE block's router over tp
// and the rank's E/ep whole experts in place of the MLP; the token and position embeddings with
// the first layer and the head with the last (a tied head apart from its embedding is a second
// copy), a vocabulary-parallel one over tp. `synced_over_dp`: the part every dp rank all-reduces
// (the experts sync over dp / ep only).
struct StageParameterCount {
  double all = 0, synced_over_dp = 0;
};

StageParameterCount stage_parameters_at_least(const GPTConfig& model, const Layout& l,
                                              const StageHolding& held) {
  const double C = model.dim, V = model.vocab, tp = l.tp;
  const double dense_mlp = double(theory::dense_mlp_parameters(model));
  const double attention_and_norms = double(theory::block_parameters(model).total()) - dense_mlp;
  const double router = double(theory::moe_mlp_parameters(model, 0));
  const double experts = double(theory::moe_mlp_parameters(model, model.experts / l.ep)) - router;
  StageParameterCount count;
  for (int layer : held.layers) {
    const bool moe = model.is_moe_block(layer);
    count.synced_over_dp += attention_and_norms / tp + (moe ? router / tp : dense_mlp / tp);
    count.all += moe ? experts : 0;
  }
  const double vocab_rows = l.vocab_parallel_head ? V / tp : V;
  const double positions = model.rope() ? 0 : double(model.seq_len);  // RoPE: no position table
  if (held.embedding) count.synced_over_dp += vocab_rows * C + positions * C;
  if (held.head)  // + the final norm
    count.synced_over_dp += (model.tie_embeddings && held.embedding ? 0 : vocab_rows * C) +
                            double(theory::norm_parameters(model));
  count.all += count.synced_over_dp;
  return count;
}

// Bytes one layer keeps for its backward per micro-batch (core/memory/activations.h), split over
// tp except ln1, res1, ln2, the output and the fp32 norm statistics (Megatron TP without
// sequence parallelism; with it those are split too, Korthikanti et al. 2022); full recompute
// keeps only the output (1/tp under SP). Under cp, ring attention keeps each local query row's
// probabilities against all T keys, where the local config's formula counts T/cp of them. An MoE
// layer (`moe`) keeps, instead of the dense MLP's fc and activation, the router's fp32
// probabilities (E per token) and each routed row's input and output (top_k rows per token,
// whole: experts are not tensor-split), and its experts' fc and activation under the phantom
// device's balanced routing.
double layer_kept_bytes(const GPTConfig& model, const GPTConfig& c, const Layout& l, bool moe) {
  const double s = static_cast<double>(dtype_size(c.dtype));
  const double C = c.dim, H = c.heads, tp = l.tp;
  const double rows = static_cast<double>(l.microbatch_size) * c.seq_len;
  const double cp_probabilities =
      l.recompute == "none" ? rows * s * H * (model.seq_len - c.seq_len) : 0.0;
  double whole =
      static_cast<double>(memory::block_kept_bytes(c, l.microbatch_size)) + cp_probabilities;
  double routed = 0;
  if (moe && l.recompute != "full") {
    // the dense MLP's fc and its activation
    const int64_t F = model.ffn_hidden();
    whole -= rows * s * double(model.fc_width(F) + F);
    // The planner simulates on the phantom device, which routes every token the same balanced
    // way: each rank's experts take as many routed rows as its tokens send (fc and activation),
    // unless a capacity below 1 drops some.
    const bool all_kept = model.capacity_factor == 0 || model.capacity_factor >= 1;
    const int64_t expert_hidden = model.expert_hidden_size();
    const double hidden = all_kept ? double(model.fc_width(expert_hidden) + expert_hidden) : 0;
    routed = rows * (4.0 * model.experts + s * model.top_k * (2 * C + hidden));
  }
  const double replicated =
      l.recompute == "full"
          ? whole
          : rows * (s * 4 * C + double(memory::norm_statistics_bytes_per_token(c)));
  return (l.sp ? whole / tp : replicated + (whole - replicated) / tp) + routed;
}

// The fewest bytes one chunk of the stage keeps per micro-batch (its chunks may hold different
// numbers of layers, and of MoE layers).
double chunk_kept_bytes(const GPTConfig& model, const GPTConfig& c, const Layout& l,
                        const StageHolding& held) {
  double fewest = -1;
  for (const std::vector<int>& layers : held.chunk_layers) {
    double bytes = 0;
    for (int layer : layers) bytes += layer_kept_bytes(model, c, l, model.is_moe_block(layer));
    fewest = fewest < 0 ? bytes : std::min(fewest, bytes);
  }
  return std::max(fewest, 0.0);
}

// What the first backward after the peak re-makes on top of it (recompute; ring attention's
// recompute under cp is blockwise, so nothing is counted there): selective, one layer's attention
// probabilities; full, one layer's kept tensors but its output (already counted).
double remade_for_backward(const GPTConfig& model, const GPTConfig& c, const Layout& l, double rows,
                           double s) {
  if (l.cp > 1 || l.recompute == "none") return 0;
  if (l.recompute == "selective") return rows * s * c.heads * c.seq_len / l.tp;
  Layout keep_all = l;
  keep_all.recompute = "none";
  GPTConfig c_all = c;
  c_all.recompute = Recompute::none;
  return layer_kept_bytes(model, c_all, keep_all, false) - rows * s * c.dim / (l.sp ? l.tp : 1);
}

// At least what stage `stage` holds at its busiest: model states (AdamW; ZeRO shards the optimizer
// over dp; ZeRO-2/3 keep whole gradients and parameters through the step, the peak), plus the
// larger of (a) its peak chunks in flight (pipeline::peak_activations_theory) with what the next
// backward re-makes, or on the stage with the head one chunk and the head's logits, and (b) dp's
// flat fp32 gradient buffer (ZeRO 0).
double stage_memory_at_least(const GPTConfig& model, const GPTConfig& c, const Layout& l,
                             int stage) {
  const double s = static_cast<double>(dtype_size(c.dtype));
  const theory::StateBytes states = theory::model_state_bytes(int(s), "adamw");
  const StageHolding held = stage_holding(model, l, stage);
  const StageParameterCount params = stage_parameters_at_least(model, l, held);
  const double optimizer = states.optimizer / (l.zero >= 1 ? double(l.dp) : 1.0);
  const double model_states = params.all * (s + states.grads + optimizer);
  const double chunk = chunk_kept_bytes(model, c, l, held);
  const int peak_chunks =
      pipeline::peak_activations_theory(l.schedule, l.pp, l.microbatches, l.virtual_stages)
          .at(static_cast<size_t>(stage));
  const double rows = static_cast<double>(l.microbatch_size) * c.seq_len;
  double activations = peak_chunks * chunk + remade_for_backward(model, c, l, rows, s);
  const double logits = rows * (l.vocab_parallel_head ? c.vocab / l.tp : c.vocab) * s;
  if (held.head) activations = std::max(activations, chunk + logits);
  const double dp_buffer = l.dp > 1 && l.zero == 0 ? 4 * params.synced_over_dp : 0;
  return model_states + std::max(activations, dp_buffer);
}

}  // namespace

// The largest of the first and the last stage's lower bounds (the middle ones hold neither the
// embedding nor the head, and no more in flight than the first).
double memory_at_least(const GPTConfig& model, const GPTConfig& c, const Layout& l) {
  return std::max(stage_memory_at_least(model, c, l, 0),
                  stage_memory_at_least(model, c, l, l.pp - 1));
}

}  // namespace mgpu::plan::detail

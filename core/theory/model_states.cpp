// Model-state formulas (see model_states.h).
#include "core/theory/model_states.h"

#include "core/theory/collectives.h"

namespace mgpu::theory {

StateBytes model_state_bytes(int weight_bytes, std::string_view optimizer) {
  const int moments = optimizer == "sgd" ? 4 : 8;
  return {weight_bytes, 4, moments + (weight_bytes < 4 ? 4 : 0)};
}

ZeroStates zero_model_states(int stage, const StateBytes& b, double psi, double n) {
  return {b.params * psi / (stage >= 3 ? n : 1.0), b.grads * psi / (stage >= 2 ? n : 1.0),
          b.optimizer * psi / (stage >= 1 ? n : 1.0)};
}

double zero_bytes_sent(int stage, const StateBytes& b, double psi, double n) {
  const double f = ring_shard_factor(n), grads = b.grads * psi, params = b.params * psi;
  if (stage == 0) return 2 * f * grads;
  if (stage < 3) return f * grads + f * params;
  return f * grads + 2 * f * params;
}

int64_t block_parameters(int64_t C) {
  const int64_t layer_norm = 2 * C;                             // weight + bias
  const int64_t attention = (C * 3 * C + 3 * C) + (C * C + C);  // qkv + proj
  const int64_t mlp = (C * 4 * C + 4 * C) + (4 * C * C + C);    // fc + proj
  return 2 * layer_norm + attention + mlp;
}

int64_t moe_mlp_parameters(int64_t C, int64_t experts, int64_t hidden, int64_t experts_used) {
  return experts * C + experts_used * (2 * hidden * C + hidden + C);
}

int64_t moe_blocks(const GPTConfig& cfg) {
  return cfg.experts > 0 ? cfg.layers / cfg.moe_every : 0;
}

namespace {
int64_t parameters_with(const GPTConfig& cfg, int64_t experts_used) {
  const int64_t C = cfg.dim, V = cfg.vocab, T = cfg.seq_len;
  const int64_t embedding = V * C + T * C;                        // wte + wpe
  const int64_t head = 2 * C + (cfg.tie_embeddings ? 0 : C * V);  // ln_f + lm_head (no bias)
  const int64_t dense_mlp = (C * 4 * C + 4 * C) + (4 * C * C + C);
  const int64_t moe = moe_blocks(cfg);
  const int64_t moe_mlp =
      moe > 0 ? moe_mlp_parameters(C, cfg.experts, cfg.expert_hidden_size(), experts_used) : 0;
  return embedding + cfg.layers * block_parameters(C) + moe * (moe_mlp - dense_mlp) + head;
}
}  // namespace

int64_t gpt_parameters(const GPTConfig& cfg) {
  return parameters_with(cfg, cfg.experts);
}

int64_t gpt_active_parameters(const GPTConfig& cfg) {
  return parameters_with(cfg, cfg.top_k);
}

int64_t stage_parameters(const GPTConfig& cfg, int64_t stage_layers, int64_t tp, bool first_stage,
                         bool last_stage) {
  const int64_t C = cfg.dim, V = cfg.vocab, T = cfg.seq_len, L = stage_layers;
  const bool head_reads_wte = cfg.tie_embeddings && first_stage && last_stage;
  return (first_stage ? (V + T) * C : 0) + L * (6 * C + (12 * C * C + 7 * C) / tp) +
         (last_stage ? (head_reads_wte ? 2 : V + 2) * C : 0);
}

int64_t embedding_group_bytes(const GPTConfig& cfg) {
  return int64_t{cfg.vocab} * cfg.dim * 4;
}

TpParameterSplit tp_parameter_split(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, v = cfg.vocab, t = cfg.seq_len, l = cfg.layers;
  TpParameterSplit n;
  n.replicated =
      v * c + t * c + l * (2 * c + 2 * c + c + c) + 2 * c + (cfg.tie_embeddings ? 0 : v * c);
  n.sharded = l * ((3 * c * c + 3 * c) + c * c + (4 * c * c + 4 * c) + 4 * c * c);
  return n;
}

}  // namespace mgpu::theory

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

BlockParameters block_parameters(const GPTConfig& cfg) {
  const int64_t C = cfg.dim, W = cfg.qkv_width(), F = cfg.ffn_hidden(), fc = cfg.fc_width(F);
  const bool bias = cfg.style.bias;
  BlockParameters n;
  n.sharded = (C * W + (bias ? W : 0)) + C * C + (C * fc + (bias ? fc : 0)) + F * C;
  n.replicated = 2 * norm_parameters(cfg) + (bias ? 2 * C : 0);
  return n;
}

int64_t dense_mlp_parameters(const GPTConfig& cfg) {
  const int64_t C = cfg.dim, F = cfg.ffn_hidden(), fc = cfg.fc_width(F);
  return C * fc + F * C + (cfg.style.bias ? fc + C : 0);
}

int64_t norm_parameters(const GPTConfig& cfg) {
  return cfg.rmsnorm() ? cfg.dim : 2 * int64_t{cfg.dim};
}

int64_t moe_mlp_parameters(int64_t C, int64_t experts, int64_t hidden, int64_t experts_used) {
  return experts * C + experts_used * (2 * hidden * C + hidden + C);
}

int64_t moe_mlp_parameters(const GPTConfig& cfg, int64_t experts_used) {
  const int64_t C = cfg.dim, H = cfg.expert_hidden_size(), fc = cfg.fc_width(H);
  const int64_t expert = C * fc + H * C + (cfg.style.bias ? fc + C : 0);
  return int64_t{cfg.experts} * C + experts_used * expert;
}

int64_t moe_blocks(const GPTConfig& cfg) {
  return cfg.experts > 0 ? cfg.layers / cfg.moe_every : 0;
}

namespace {
int64_t parameters_with(const GPTConfig& cfg, int64_t experts_used) {
  const int64_t C = cfg.dim, V = cfg.vocab, T = cfg.seq_len;
  const int64_t embedding = V * C + (cfg.rope() ? 0 : T * C);                    // wte (+ wpe)
  const int64_t head = norm_parameters(cfg) + (cfg.tie_embeddings ? 0 : C * V);  // no bias
  const int64_t moe = moe_blocks(cfg);
  const int64_t moe_mlp = moe > 0 ? moe_mlp_parameters(cfg, experts_used) : 0;
  return embedding + cfg.layers * block_parameters(cfg).total() +
         moe * (moe_mlp - dense_mlp_parameters(cfg)) + head;
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
  const BlockParameters block = block_parameters(cfg);
  return (first_stage ? V * C + (cfg.rope() ? 0 : T * C) : 0) +
         L * (block.replicated + block.sharded / tp) +
         (last_stage ? (head_reads_wte ? 0 : V * C) + norm_parameters(cfg) : 0);
}

int64_t kv_bytes_per_token(const GPTConfig& cfg, int dtype_bytes) {
  return 2 * cfg.kv_dim() * dtype_bytes;
}

int64_t embedding_group_bytes(const GPTConfig& cfg) {
  return int64_t{cfg.vocab} * cfg.dim * 4;
}

TpParameterSplit tp_parameter_split(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, v = cfg.vocab, t = cfg.seq_len, l = cfg.layers;
  const BlockParameters block = block_parameters(cfg);
  TpParameterSplit n;
  n.replicated = v * c + (cfg.rope() ? 0 : t * c) + l * block.replicated + norm_parameters(cfg) +
                 (cfg.tie_embeddings ? 0 : v * c);
  n.sharded = l * block.sharded;
  return n;
}

}  // namespace mgpu::theory

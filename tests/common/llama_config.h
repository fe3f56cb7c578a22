// A Llama-shaped tiny model for tests of the Llama block (test_llama_model) and of the layouts
// that run it (test_context_parallel_llama): 4 query heads sharing 2 kv heads, head size 4,
// RMSNorm, SwiGLU with F = 24, RoPE with a small base (every pair turns visibly over a few
// tokens), no biases.
#pragma once
#include "core/model/config.h"

namespace mgpu::testing {

inline GPTConfig small_llama_config() {
  GPTConfig cfg;
  cfg.vocab = 11;
  cfg.seq_len = 6;
  cfg.layers = 2;
  cfg.dim = 16;
  cfg.heads = 4;
  cfg.seed = 5;
  cfg.style = {.norm = Norm::rmsnorm,
               .mlp = MlpKind::swiglu,
               .ffn_dim = 24,
               .positions = Positions::rope,
               .rope_theta = 100.0f,
               .kv_heads = 2,
               .bias = false};
  return cfg;
}

}  // namespace mgpu::testing

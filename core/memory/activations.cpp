// Activation formulas of one GPT training step (see activations.h).
#include "core/memory/activations.h"

#include "core/tensor/tensor.h"

namespace mgpu::memory {

namespace {
constexpr int64_t kStatisticsBytes = 4;  // layernorm mean and rstd stay fp32 in every precision
}

int64_t block_kept_elements(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, f = cfg.ffn_hidden();
  // ln1, attention's output, res1, ln2 and the block's output (C each), qkv, fc, its activation.
  return 5 * c + cfg.qkv_width() + cfg.fc_width(f) + f;
}

int64_t norm_statistics_bytes(const GPTConfig& cfg) {
  return (cfg.rmsnorm() ? 1 : 2) * kStatisticsBytes;
}

int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, h = cfg.heads, t = cfg.seq_len;
  const int64_t statistics = 2 * norm_statistics_bytes(cfg);  // ln1 and ln2
  switch (cfg.recompute) {
    case Recompute::none:
      return bt * (s * (block_kept_elements(cfg) + h * t) + statistics);
    case Recompute::selective:
      return bt * (s * block_kept_elements(cfg) + statistics);
    case Recompute::full:
      return bt * s * c;
  }
  return 0;
}

StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, v = cfg.vocab;
  // The embedding's output, and the head's norm (+ its statistics), logits and their gradient.
  const int64_t embedding_and_head = bt * (s * c + s * c + norm_statistics_bytes(cfg) + 2 * s * v);
  // Backward re-makes what its recompute mode dropped, one block at a time.
  GPTConfig kept_all = cfg;
  kept_all.recompute = Recompute::none;
  const int64_t remade = cfg.recompute == Recompute::none ? 0
                         : cfg.recompute == Recompute::selective
                             ? bt * s * int64_t(cfg.heads) * cfg.seq_len  // the probabilities
                             : block_kept_bytes(kept_all, batch);         // the whole block
  StepActivationBytes bytes;
  bytes.activations = cfg.layers * block_kept_bytes(cfg, batch) + embedding_and_head + remade;
  // One block's backward: d_fc (4C), d_qkv (3C), d_ln, d_res1, d_attn_out and the residual
  // stream's gradient dx, C each: 11 C per token for GPT-2's block; SwiGLU adds the F-wide
  // gradient of its product.
  const int64_t f = cfg.ffn_hidden();
  bytes.workspace = bt * s * (cfg.fc_width(f) + (cfg.swiglu() ? f : 0) + cfg.qkv_width() + 4 * c);
  return bytes;
}

}  // namespace mgpu::memory

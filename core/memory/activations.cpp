// Activation formulas of one GPT training step (see activations.h).
#include "core/memory/activations.h"

#include "core/tensor/tensor.h"

namespace mgpu::memory {

namespace {
constexpr int64_t kStatisticsBytes = 4;  // norm statistics stay fp32 in every precision
}

int64_t block_kept_elements_per_token(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, f = cfg.ffn_hidden();
  // ln1, attention out, res1, ln2 and the output C each; qkv (H + 2 KV) D; fc and its activation.
  return 5 * c + cfg.qkv_width() + cfg.fc_width(f) + f;
}

int64_t norm_statistics_bytes_per_token(const GPTConfig& cfg) {
  const int64_t per_norm = cfg.rmsnorm() ? 1 : 2;  // rstd (RMSNorm keeps no mean) | mean, rstd
  return 2 * per_norm * kStatisticsBytes;          // ln1 and ln2
}

int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t h = cfg.heads, t = cfg.seq_len;
  const int64_t kept = block_kept_elements_per_token(cfg);
  const int64_t statistics = norm_statistics_bytes_per_token(cfg);
  switch (cfg.recompute) {
    case Recompute::none:
      return bt * (s * (kept + h * t) + statistics);
    case Recompute::selective:
      return bt * (s * kept + statistics);
    case Recompute::full:
      return bt * s * cfg.dim;
  }
  return 0;
}

int64_t block_backward_elements_per_token(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, f = cfg.ffn_hidden();
  // d_fc (fc's width), d_qkv, d_ln (ln1's and ln2's, one buffer), d_res1, d_attn_out and the
  // residual stream's dx, C each; SwiGLU's d of silu(gate) * up, F (GELU's is d_fc in place).
  return cfg.fc_width(f) + cfg.qkv_width() + 4 * c + (cfg.swiglu() ? f : 0);
}

StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, v = cfg.vocab;
  // The embedding's output, and the head's norm (+ 2 statistics: the head allocates both in either
  // norm), logits and their gradient.
  const int64_t embedding_and_head = bt * (s * c + s * c + 2 * kStatisticsBytes + 2 * s * v);
  // Backward re-makes what its recompute mode dropped, one block at a time.
  GPTConfig kept_all = cfg;
  kept_all.recompute = Recompute::none;
  const int64_t remade = cfg.recompute == Recompute::none ? 0
                         : cfg.recompute == Recompute::selective
                             ? bt * s * int64_t(cfg.heads) * cfg.seq_len  // the probabilities
                             : block_kept_bytes(kept_all, batch);         // the whole block
  StepActivationBytes bytes;
  bytes.activations = cfg.layers * block_kept_bytes(cfg, batch) + embedding_and_head + remade;
  bytes.workspace = bt * s * block_backward_elements_per_token(cfg);
  return bytes;
}

}  // namespace mgpu::memory

// Activation formulas of one GPT training step (see activations.h).
#include "core/memory/activations.h"

#include "core/tensor/tensor.h"

namespace mgpu::memory {

namespace {
constexpr int64_t kStatisticsBytes = 4;  // layernorm mean and rstd stay fp32 in every precision

// Statistics per token of one norm: mean and rstd, or RMSNorm's rstd alone.
int64_t norm_statistics(const GPTConfig& cfg) {
  return cfg.rmsnorm() ? 1 : 2;
}
}  // namespace

int64_t block_kept_elements(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, f = cfg.ffn_hidden();
  return 5 * c + cfg.qkv_width() + cfg.fc_width(f) + f;
}

int64_t block_statistics_bytes(const GPTConfig& cfg) {
  return 2 * norm_statistics(cfg) * kStatisticsBytes;  // ln1 and ln2
}

int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, h = cfg.heads, t = cfg.seq_len;
  const int64_t kept = block_kept_elements(cfg), statistics = block_statistics_bytes(cfg);
  switch (cfg.recompute) {
    case Recompute::none:
      return bt * (s * (kept + h * t) + statistics);
    case Recompute::selective:
      return bt * (s * kept + statistics);
    case Recompute::full:
      return bt * s * c;
  }
  return 0;
}

StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, v = cfg.vocab, f = cfg.ffn_hidden();
  // The embedding's output, and the head's norm (+ its statistics), logits and their gradient.
  const int64_t embedding_and_head =
      bt * (s * c + s * c + norm_statistics(cfg) * kStatisticsBytes + 2 * s * v);
  // Backward re-makes what its recompute mode dropped, one block at a time.
  GPTConfig kept_all = cfg;
  kept_all.recompute = Recompute::none;
  const int64_t remade = cfg.recompute == Recompute::none ? 0
                         : cfg.recompute == Recompute::selective
                             ? bt * s * int64_t(cfg.heads) * cfg.seq_len  // the probabilities
                             : block_kept_bytes(kept_all, batch);         // the whole block
  StepActivationBytes bytes;
  bytes.activations = cfg.layers * block_kept_bytes(cfg, batch) + embedding_and_head + remade;
  // One block's backward: d_fc (F, or gate | up 2F and SwiGLU's own F for the activation's
  // gradient), d_qkv (H + 2 KV) D, d_ln, d_res1, d_attn_out and the residual stream's gradient
  // dx, C each: GPT-2's 4C + 3C + 4C = 11 C per token.
  const int64_t d_fc = cfg.fc_width(f) + (cfg.swiglu() ? f : 0);
  bytes.workspace = bt * s * (d_fc + cfg.qkv_width() + 4 * c);
  return bytes;
}

}  // namespace mgpu::memory

// Activation formulas of one GPT training step (see activations.h).
#include "core/memory/activations.h"

#include "core/tensor/tensor.h"

namespace mgpu::memory {

namespace {
constexpr int64_t kStatisticsBytes = 4;  // layernorm mean and rstd stay fp32 in every precision
}

int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, h = cfg.heads, t = cfg.seq_len;
  const int64_t statistics = 4 * kStatisticsBytes;  // ln1 and ln2: mean and rstd per token
  switch (cfg.recompute) {
    case Recompute::none:
      return bt * (s * (16 * c + h * t) + statistics);
    case Recompute::selective:
      return bt * (s * 16 * c + statistics);
    case Recompute::full:
      return bt * s * c;
  }
  return 0;
}

StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch) {
  const int64_t bt = batch * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, v = cfg.vocab;
  // The embedding's output, and the head's layernorm (+ 2 statistics), logits and their gradient.
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
  // One block's backward: d_fc 4C, d_qkv 3C, d_ln, d_res1, d_attn_out and the residual stream's
  // gradient dx, C each: 11 C per token.
  bytes.workspace = bt * s * 11 * c;
  return bytes;
}

}  // namespace mgpu::memory

// Activation memory of one training step of the GPT (core/model/gpt.h) on one device, as
// formulas of the shapes: what each block keeps from forward to backward under each recompute
// mode, what backward re-makes for one block at a time, and the gradient buffers backward works
// in. The activation_checkpointing lesson prints the per-block formula beside the allocator's
// measurement; the host-memory pre-check adds them up before anything is allocated.
#pragma once
#include <cstdint>

#include "core/model/gpt.h"

namespace mgpu::memory {

// Bytes one block keeps for backward (s = bytes per element of cfg.dtype, B = batch, T = seq):
//   none       B T [ s (16 C + H T) + 16 ]   ln1, qkv 3C, attn out, res1, ln2, fc 4C, gelu 4C, out;
//                                            H T probabilities; four fp32 layernorm statistics
//   selective  B T [ s 16 C + 16 ]           the probabilities are recomputed from q, k
//   full       B T s C                       only the block's output (its input is the previous)
// GPT-2's block; in any style the 16 C is block_kept_elements (qkv (H + 2 KV) D, SwiGLU's fc
// gate | up 2F) and the 16 B block_statistics_bytes (RMSNorm keeps no mean).
int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch);
// Elements per token a dense block keeps under recompute none, the probabilities aside: ln1,
// attention out, res1, ln2, out (C each), qkv (H + 2 KV) D, fc (F, or 2F under SwiGLU) and the
// activation's output F. GPT-2's 16 C.
int64_t block_kept_elements(const GPTConfig& cfg);
// fp32 bytes per token of the two norms' statistics: mean and rstd each (16), rstd only under
// RMSNorm (8).
int64_t block_statistics_bytes(const GPTConfig& cfg);

// Bytes of one step's activations and backward buffers on one device, by allocator category.
struct StepActivationBytes {
  int64_t activations = 0;  // every block's kept bytes + embedding + head + one block re-made
  int64_t workspace = 0;    // backward's gradient buffers (one block's at a time)
};
StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch);

}  // namespace mgpu::memory

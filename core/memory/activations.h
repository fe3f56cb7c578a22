// Activation memory of one training step of the GPT (core/model/gpt.h) on one device, as
// formulas of the shapes: what each block keeps from forward to backward under each recompute
// mode, what backward re-makes for one block at a time, and the gradient buffers backward works
// in. The activation_checkpointing lesson prints the per-block formula beside the allocator's
// measurement; the host-memory pre-check adds them up before anything is allocated.
#pragma once
#include <cstdint>

#include "core/model/gpt.h"

namespace mgpu::memory {

// Elements per token one block keeps for backward besides the probabilities (Korthikanti et al.
// 2022's 34 s b h counts the same tensors of GPT-2's block in 2-byte units): ln1, the attention's
// output, res1, ln2 and the output, C each; qkv, (H + 2 KV) D (grouped-query attention keeps only
// KV key and value heads; RoPE rotates q and k in place: nothing more); fc's output, F or 2F
// (SwiGLU's gate | up), and its activation, F. GPT-2: 5C + 3C + 4C + 4C = 16C.
int64_t block_kept_elements_per_token(const GPTConfig& cfg);
// Bytes per token of the fp32 norm statistics a block keeps: LayerNorm's mean and rstd, RMSNorm's
// rstd only, for ln1 and ln2 (GPT-2: 16; Llama: 8).
int64_t norm_statistics_bytes_per_token(const GPTConfig& cfg);

// Bytes one block keeps for backward (s = bytes per element of cfg.dtype, B = batch, T = seq,
// K = block_kept_elements_per_token, S = norm_statistics_bytes_per_token):
//   none       B T [ s (K + H T) + S ]       the above and the H T probabilities
//   selective  B T [ s K + S ]               the probabilities are recomputed from q, k
//   full       B T s C                       only the block's output (its input is the previous)
// GPT-2: K = 16 C, S = 16.
int64_t block_kept_bytes(const GPTConfig& cfg, int64_t batch);

// Elements per token of one block's backward buffers (MemCategory::workspace): the upstream
// gradients of fc, qkv, the norms, res1, the attention's output and the residual stream, and
// SwiGLU's gradient of its product. GPT-2: 4C + 3C + 4C = 11C.
int64_t block_backward_elements_per_token(const GPTConfig& cfg);

// Bytes of one step's activations and backward buffers on one device, by allocator category.
struct StepActivationBytes {
  int64_t activations = 0;  // every block's kept bytes + embedding + head + one block re-made
  int64_t workspace = 0;    // backward's gradient buffers (one block's at a time)
};
StepActivationBytes step_activation_bytes(const GPTConfig& cfg, int64_t batch);

}  // namespace mgpu::memory

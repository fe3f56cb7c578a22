// The sequence-parallel lesson, and the formula for the activations it measures (for tests).
#pragma once
#include <cstdint>
#include <memory>

#include "core/model/gpt.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// Bytes of activations one tp rank keeps for the backward at its peak, from the shapes of this
// model's saved tensors (fp32 or cfg.dtype; layernorm statistics fp32), under cfg.recompute:
// per layer ln1, ln2, res1, out (1/t under SP) and qkv, attention probabilities, attn_out, fc,
// gelu (1/t in both); outside the layers the embedding's output (1/t under SP), the head's input
// (SP only: the gathered last output), its layernorm, logits and their gradient.
struct ActivationBytes {
  int64_t per_layer = 0;  // one layer's saved tensors (recompute none)
  int64_t outside = 0;    // embedding output, head input, head activations
  int64_t peak = 0;       // what the allocator should see at its peak under cfg.recompute
};
ActivationBytes activation_bytes(const GPTConfig& cfg, int64_t batch, int64_t seq, int tp,
                                 bool sequence_parallel);

std::unique_ptr<Lesson> make_sequence_parallel_lesson();

}  // namespace mgpu::lessons

// Zero-bubble's split backward of a stage's layers. A layer's backward does two things: the
// gradient w.r.t. its INPUT (B: the previous stage is waiting for it) and the gradient w.r.t. its
// WEIGHTS (W: nobody waits; ZB-H1 defers it to fill bubbles). For a Linear y = x W^T + b:
//   B: dx = dy @ W                     W: dW += dy^T @ x,  db += colsum(dy)
// so B must keep every Linear's dy (x is already in the activations) for W. LayerNorm's
// backward kernel computes both at once; B discards its weight part and W recomputes it (cheap,
// elementwise), rather than faking W's cost. A block's halves are the Block's own
// (Block::backward_input / backward_weight: its one backward, run split); the head's are here.
#pragma once
#include <span>

#include "core/model/gpt.h"

namespace mgpu::pipeline {

using mgpu::BlockWeightGradInputs;  // what B keeps for W (core/model/gpt.h)

// B: dx = d loss / d x (dx may alias dout), filling `keep`. Parameter grads are untouched.
void block_backward_input(const Block& block, Tensor& dx, const Tensor& dout,
                          const BlockActivations& acts, BlockWeightGradInputs& keep);
// W: parameter grads += from what B kept.
void block_backward_weight(Block& block, const BlockActivations& acts,
                           const BlockWeightGradInputs& keep);

struct HeadWeightGradInputs {
  Tensor d_ln;  // dy of ln_f (= dlogits @ W_lm_head); dlogits itself stays in the activations
};
void head_backward_input(const Head& head, Tensor& dx, const HeadActivations& acts,
                         HeadWeightGradInputs& keep);
void head_backward_weight(Head& head, const HeadActivations& acts,
                          const HeadWeightGradInputs& keep);

}  // namespace mgpu::pipeline

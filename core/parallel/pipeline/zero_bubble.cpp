// Zero-bubble's split backward: a block's B and W are the Block's own halves of its one backward
// (core/model/gpt.cpp); the head's are here, with each Linear's and LayerNorm's backward cut in
// two.
#include "core/parallel/pipeline/zero_bubble.h"

#include "core/ops/ops.h"

namespace mgpu::pipeline {

void block_backward_input(const Block& block, Tensor& dx, const Tensor& dout,
                          const BlockActivations& a, BlockWeightGradInputs& keep) {
  block.backward_input(dx, dout, a, keep);
}

void block_backward_weight(Block& block, const BlockActivations& a,
                           const BlockWeightGradInputs& keep) {
  block.backward_weight(a, keep);
}

void head_backward_input(const Head& head, Tensor& dx, const HeadActivations& a,
                         HeadWeightGradInputs& keep) {
  // Kept in the activations' type, as the whole backward's is, so B + W round alike.
  keep.d_ln = Tensor::empty(a.ln.shape(), MemCategory::activations, a.ln.dtype());
  if (head.comm)  // vocabulary-parallel: my rows' partial product, summed over the tp group
    head.comm->input_grad(keep.d_ln, a.dlogits, head.output_weight().data);
  else
    ops::matmul(keep.d_ln, a.dlogits, head.output_weight().data);  // the tied wte or lm_head's
  head.ln_f.backward_input(dx, keep.d_ln, a.input, a.ln_mean, a.ln_rstd);
}

void head_backward_weight(Head& head, const HeadActivations& a, const HeadWeightGradInputs& keep) {
  ops::matmul(head.output_weight().grad, a.dlogits, a.ln, /*trans_a=*/true, false, /*beta=*/1.0f);
  if (head.lm_head.bias.grad.defined()) ops::bias_grad(head.lm_head.bias.grad, a.dlogits);
  head.ln_f.backward_weight(keep.d_ln, a.input, a.ln_mean, a.ln_rstd);
}

}  // namespace mgpu::pipeline

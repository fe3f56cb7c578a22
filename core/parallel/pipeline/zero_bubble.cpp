// Block and Head backward, split into B (input gradient) and W (weight gradient). Reads like
// Block::backward in core/model/gpt.cpp, with each Linear's backward cut in two.
#include "core/parallel/pipeline/zero_bubble.h"

#include "core/ops/ops.h"

namespace mgpu::pipeline {

namespace {

// The upstream gradients are kept in the activations' type (bf16/fp16 under mixed precision),
// as Block::backward's are, so B + W round exactly as the fused backward does.
Tensor kept(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, MemCategory::activations, dtype);
}
// Discarded halves: a weight-gradient half in the gradients' type, an input-gradient half in
// the activations'.
Tensor scratch(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::zeros(shape, MemCategory::workspace, dtype);
}

BlockHooks& hooks_of(const Block& block) {
  static BlockHooks one_device;  // no layout communicates: the plain math
  return block.hooks ? *block.hooks : one_device;
}

// LayerNorm input gradient; the kernel also produces weight grads, which B throws away.
void layernorm_input_grad(Tensor& dx, const Tensor& dout, const Tensor& inp, const LayerNorm& ln,
                          const Tensor& mean, const Tensor& rstd) {
  Tensor dw = scratch(ln.weight.grad.shape(), ln.weight.grad.dtype());
  Tensor db = scratch(ln.bias.grad.shape(), ln.bias.grad.dtype());
  ops::layernorm_backward(dx, dw, db, dout, inp, ln.weight.data, mean, rstd);
}

// LayerNorm weight gradient (the input-gradient half of the kernel goes to scratch).
void layernorm_weight_grad(LayerNorm& ln, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                           const Tensor& rstd) {
  Tensor dx = scratch(inp.shape(), inp.dtype());
  ops::layernorm_backward(dx, ln.weight.grad, ln.bias.grad, dout, inp, ln.weight.data, mean, rstd);
}

// dW += dy^T @ x, db += colsum(dy): the W half of Linear::backward.
void linear_weight_grad(Linear& linear, const Tensor& dout, const Tensor& inp) {
  ops::matmul(linear.weight.grad, dout, inp, /*trans_a=*/true, false, /*beta=*/1.0f);
  if (linear.bias.grad.defined()) ops::bias_grad(linear.bias.grad, dout);
}

}  // namespace

void block_backward_input(const Block& block, Tensor& dx, const Tensor& dout,
                          const BlockActivations& a, BlockWeightGradInputs& keep) {
  const Shape& shape = a.out.shape();  // [B,T,C]
  const DType dt = a.out.dtype();
  keep.d_out = kept(shape, dt);
  keep.d_out.copy_from(dout);
  keep.d_fc = kept(a.fc.shape(), dt);
  keep.d_ln2 = kept(shape, dt);
  keep.d_res1 = kept(shape, dt);
  keep.d_qkv = kept(a.qkv.shape(), dt);
  keep.d_ln1 = kept(shape, dt);
  Tensor d_attn_out = Tensor::empty(a.attn_out.shape(), MemCategory::workspace, dt);

  // MLP branch: dy @ W for each Linear, GELU and LayerNorm input grads in between.
  ops::matmul(keep.d_fc, keep.d_out, block.mlp_proj.weight.data);
  ops::gelu_backward(keep.d_fc, a.fc, keep.d_fc);
  // (Row-parallel input gradients stay local under TP; column-parallel ones are partial sums,
  // which the block's hooks complete.)
  BlockHooks& hooks = hooks_of(block);
  hooks.column_backward_input(block.fc, keep.d_ln2, keep.d_fc);
  layernorm_input_grad(keep.d_res1, keep.d_ln2, a.res1, block.ln2, a.ln2_mean, a.ln2_rstd);
  ops::axpy(keep.d_res1, 1.0f, keep.d_out);  // the residual path

  // Attention branch.
  ops::matmul(d_attn_out, keep.d_res1, block.attn_proj.weight.data);
  hooks.attention_backward(keep.d_qkv, d_attn_out, a.qkv, a.attn_out, a.att, a.lse, block.heads);
  hooks.column_backward_input(block.qkv, keep.d_ln1, keep.d_qkv);
  layernorm_input_grad(dx, keep.d_ln1, a.input, block.ln1, a.ln1_mean, a.ln1_rstd);
  ops::axpy(dx, 1.0f, keep.d_res1);
}

void block_backward_weight(Block& block, const BlockActivations& a,
                           const BlockWeightGradInputs& keep) {
  linear_weight_grad(block.mlp_proj, keep.d_out, a.fc_gelu);
  linear_weight_grad(block.fc, keep.d_fc, a.ln2);
  layernorm_weight_grad(block.ln2, keep.d_ln2, a.res1, a.ln2_mean, a.ln2_rstd);
  linear_weight_grad(block.attn_proj, keep.d_res1, a.attn_out);
  linear_weight_grad(block.qkv, keep.d_qkv, a.ln1);
  layernorm_weight_grad(block.ln1, keep.d_ln1, a.input, a.ln1_mean, a.ln1_rstd);
}

void head_backward_input(const Head& head, Tensor& dx, const HeadActivations& a,
                         HeadWeightGradInputs& keep) {
  keep.d_ln = kept(a.ln.shape(), a.ln.dtype());
  ops::matmul(keep.d_ln, a.dlogits, head.output_weight().data);
  layernorm_input_grad(dx, keep.d_ln, a.input, head.ln_f, a.ln_mean, a.ln_rstd);
}

void head_backward_weight(Head& head, const HeadActivations& a, const HeadWeightGradInputs& keep) {
  ops::matmul(head.output_weight().grad, a.dlogits, a.ln, /*trans_a=*/true, false, /*beta=*/1.0f);
  layernorm_weight_grad(head.ln_f, keep.d_ln, a.input, a.ln_mean, a.ln_rstd);
}

}  // namespace mgpu::pipeline

// A stage runner's zero-bubble steps beyond the plain backward: B of a block under --recompute,
// and W, the weight gradients of a micro-batch whose B already ran.
#include <fmt/format.h>

#include "core/parallel/pipeline/executor_internal.h"

namespace mgpu::pipeline::detail {

// Zero-bubble's B of one block under --recompute: the dropped activations are recomputed once,
// here, and what W reads of them stays in the stash until W runs (the attention probabilities,
// qkv and the MLP pre-activation do not: only B reads them).
void StageRunner::backward_input_recomputed(const Block& block, Tensor& grad,
                                            BlockActivations& kept, BlockWeightGradInputs& keep) {
  if (block.config.recompute == Recompute::none) {
    block_backward_input(block, grad, grad, kept, keep);
    return;
  }
  BlockActivations a = block.recomputed(kept);
  block_backward_input(block, grad, grad, a, keep);
  a.qkv = a.att = a.fc = Tensor();
  a.out = kept.out;  // the forward's output: a send may still be reading it
  kept = std::move(a);
}

// Zero-bubble's W: the weight gradients of a micro-batch whose B already ran.
void StageRunner::backward_weight(int mb, int chunk) {
  ComputeScope scope({.name = fmt::format("W{}", mb),
                      .cat = trace::cat::backward_weight,
                      .microbatch = mb,
                      .chunk = chunk});
  Stash& stash = stashes_.at({mb, chunk});
  if (stash.head) head_backward_weight(*model_.head, *stash.head, *stash.head_keep);
  auto& blocks = model_.chunks[chunk];
  for (size_t i = 0; i < blocks.size(); ++i)
    block_backward_weight(blocks[i], stash.blocks[i], stash.blocks_keep[i]);
  if (is_first(chunk))
    model_.embedding->backward(stash.embedding_grad, microbatches_.at(mb).tokens);
  if (options_.theory) charge_theory_time(options_.theory->backward * 0.5);
  release(mb, chunk);
}

}  // namespace mgpu::pipeline::detail

// A stage runner's two ends under sequence parallelism: the first virtual stage's embedding cut
// to this rank's tokens, and the whole sequence gathered for the head (and cut again after it).
#include "core/parallel/pipeline/executor_internal.h"
#include "core/parallel/sequence_parallel.h"

namespace mgpu::pipeline::detail {

// Sequence parallelism at the pipeline's two ends (options_.sequence_parallel): every tp rank
// embeds the whole micro-batch and keeps its tokens (a cut, Megatron's "scatter"); the head
// reads the whole sequence, all-gathered; its input gradient is the same on every rank (the
// head ran alike everywhere), so the backward of the gather is a cut too, and the embedding's
// gradient is the whole sequence's, gathered. Without it, each is the tensor itself.
void StageRunner::embed(int mb, Tensor& mine) {
  const data::Batch& batch = microbatches_.at(mb);
  comm::Comm* tp = options_.sequence_parallel;
  if (!tp) return model_.embedding->forward(mine, batch.tokens);
  Tensor whole =
      Tensor::empty(whole_sequence_shape(mb), MemCategory::workspace, model_.config.dtype);
  model_.embedding->forward(whole, batch.tokens);
  parallel::keep_my_tokens(mine, whole, tp->rank(), tp->size());
}
Tensor StageRunner::gather_sequence(const Tensor& mine, int mb, MemCategory category) {
  comm::Comm* tp = options_.sequence_parallel;
  if (!tp) return mine;
  Tensor whole = Tensor::empty(whole_sequence_shape(mb), category, mine.dtype());
  parallel::all_gather_sequence(whole, mine, *tp);
  return whole;
}
Tensor StageRunner::keep_my_tokens_of(const Tensor& whole, int mb) {
  comm::Comm* tp = options_.sequence_parallel;
  if (!tp) return whole;
  Tensor mine = Tensor::empty(activation_shape(mb), MemCategory::comm_buffers, whole.dtype());
  parallel::keep_my_tokens(mine, whole, tp->rank(), tp->size());
  return mine;
}

}  // namespace mgpu::pipeline::detail

// The vocabulary-parallel head, top to bottom (see vocab_parallel.h for the idea):
//   1. sharding: my rows of lm_head, cut from the seeded single-device matrix;
//   2. the loss: my columns' statistics, all-gathered over the tp group, then the global
//      log-sum-exp, the loss and my columns of its gradient;
//   3. the backward: the column linear's input gradient, a partial product summed over the group.
#include "core/parallel/vocab_parallel.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/model/trace_phase.h"
#include "core/ops/ops.h"

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- sharding

void check_vocab_parallel(const GPTConfig& cfg, int tp) {
  if (cfg.tie_embeddings)
    throw std::invalid_argument(
        "the vocabulary-parallel head cannot read tied embeddings (wte would need a "
        "vocabulary-parallel embedding too): drop --tie-embeddings or the vocabulary-parallel "
        "head");
  if (tp >= 1 && cfg.vocab % tp == 0) return;
  throw std::invalid_argument(fmt::format(
      "the vocabulary-parallel head over {} ranks needs {} to divide the vocabulary ({}): pad "
      "--vocab to a multiple of {} or drop the vocabulary-parallel head",
      tp, tp, cfg.vocab, tp));
}

void split_head(Head& head, const GPTConfig& cfg, int tp, int rank) {
  check_vocab_parallel(cfg, tp);
  const int64_t rows = cfg.vocab / tp;
  head.lm_head.weight.shape = {rows, cfg.dim};  // declared: materialised as my rows only
  head.lm_head.weight.spec =
      PartitionSpec::rows({cfg.vocab, cfg.dim}, {{rank * rows, (rank + 1) * rows}});
}

VocabParallelHead::VocabParallelHead(comm::Comm& tp, int64_t vocab, PartialSums sums,
                                     TracePhase* phase)
    : tp_(tp), vocab_begin_(tp.rank() * (vocab / tp.size())), sums_(sums), phase_(phase) {}

// ---------------------------------------------------------------------------------- the loss

float VocabParallelHead::cross_entropy(Tensor& dlogits, const Tensor& logits,
                                       std::span<const int32_t> targets, float grad_scale) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  Tensor stats = Tensor::empty({3, rows}, MemCategory::comm_buffers, DType::f32);
  ops::vocab_parallel_ce_stats(stats, logits, targets, vocab_begin_);
  // 3 floats per token per rank: the [B,T,V] logits never cross the wire.
  Tensor all_stats = Tensor::empty({tp_.size(), 3, rows}, MemCategory::comm_buffers, DType::f32);
  with_phase_paused(phase_, [&] { tp_.all_gather(stats, all_stats); });
  return ops::vocab_parallel_ce_forward_backward(dlogits, logits, all_stats, targets, vocab_begin_,
                                                 grad_scale);
}

// ---------------------------------------------------------------------------------- backward

void VocabParallelHead::input_grad(Tensor& d_ln, const Tensor& dlogits, const Tensor& weight) {
  // f's backward: my vocabulary rows' share of dlogits @ W, summed over the group (in fp32 for
  // 2-byte activations unless the layout sums in their type, as Megatron does).
  const bool in_fp32 = d_ln.dtype() != DType::f32 && sums_ == PartialSums::fp32;
  Tensor partial = in_fp32 ? fp32_partial(d_ln) : d_ln;
  ops::matmul(partial, dlogits, weight);
  with_phase_paused(phase_, [&] { tp_.all_reduce(partial, comm::ReduceOp::sum); });
  if (in_fp32) ops::convert(d_ln, partial);  // rounded once
}

}  // namespace mgpu::parallel

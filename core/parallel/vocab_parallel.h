// The vocabulary-parallel head (Megatron-LM, Shoeybi et al. 2019, section 3): the LM head's matrix
// [V, C] is split by rows over the tensor-parallel group, so each rank computes the logits of its
// V/t tokens of the vocabulary (a column-parallel linear, with f before it: identity forward,
// all-reduce of the input's gradient backward) and the last stage's head work is 1/t, not all.
// The cross-entropy never gathers the [B,T,V] logits: per token each rank all-gathers three
// floats (its max, its sum of exps, the target's logit where it owns the target); from those
// every rank forms the global log-sum-exp, the loss, and its own columns of softmax - onehot.
// Tied embeddings are refused: the head would read a wte split over the vocabulary, which needs
// Megatron's vocabulary-parallel embedding too.
#pragma once
#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/model/trace_phase.h"
#include "core/parallel/tensor_parallel.h"

namespace mgpu::parallel {

// Throws std::invalid_argument (one line, what would work) unless tp divides the vocabulary and
// the embeddings are untied.
void check_vocab_parallel(const GPTConfig& cfg, int tp);

// Declares lm_head's rows [rank*V/tp, (rank+1)*V/tp) as this rank's (PartitionSpec::rows, so a
// checkpoint holds the single-device [V, C] matrix).
void split_head(Head& head, const GPTConfig& cfg, int tp, int rank);

// The head's communication over the tp group. `sums`: where the input gradient's partial products
// are summed (fp32, or in the activations' type as Megatron sends them); `phase`: the layout's
// forward/backward region, paused around the collectives (may be null).
class VocabParallelHead : public HeadComm {
 public:
  VocabParallelHead(comm::Comm& tp, int64_t vocab, PartialSums sums = PartialSums::fp32,
                    TracePhase* phase = nullptr);
  int vocab_parts() const override { return tp_.size(); }
  float cross_entropy(Tensor& dlogits, const Tensor& logits, std::span<const int32_t> targets,
                      float grad_scale) override;
  void input_grad(Tensor& d_ln, const Tensor& dlogits, const Tensor& weight) override;

 private:
  comm::Comm& tp_;
  int64_t vocab_begin_;  // my first row of the vocabulary
  PartialSums sums_;
  TracePhase* phase_;
};

}  // namespace mgpu::parallel

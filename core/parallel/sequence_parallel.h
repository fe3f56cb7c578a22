// Sequence parallelism (Megatron-SP, Korthikanti et al. 2022) on top of tensor parallelism. TP
// leaves the layernorms, residual adds and dropouts replicated: every tp rank stores the same
// [B,T,C] activations there. SP splits those regions along the sequence instead (rank r keeps
// tokens [r*T/t, (r+1)*T/t)) and replaces TP's all-reduces with their two halves, at TP's places:
//   f-bar (where TP's f is, before a column-parallel linear): all-gather along the sequence
//         forward, reduce-scatter backward;
//   g-bar (where TP's g is, after a row-parallel linear): reduce-scatter forward, all-gather
//         backward.
// (Korthikanti et al. call this pair g and g-bar, and TP's pair f and f-bar; here TP keeps Shoeybi
// et al.'s f and g, and SP's operators carry a bar over the letter of the place they take.)
// A ring all-reduce IS a reduce-scatter followed by an all-gather, so the bytes on the wire are
// TP's; what shrinks is the activation memory outside the linears, to 1/t.
#pragma once
#include <vector>

#include "core/parallel/tensor_parallel.h"

namespace mgpu::parallel {

// Throws std::invalid_argument (one line, naming what works) unless tp suits the model (as for
// TP) and divides the sequence length `seq` into equal parts.
void check_sp_size(const GPTConfig& cfg, int tp, int seq);

// The rank's tokens of a [B,T,C] tensor, and back. Activations are [B,T,C] row-major, so one
// rank's T/t tokens are B separate runs (Megatron keeps [T,B,C], where they are one run); these
// copy between the full tensor and the rank-major layout [t][B,T/t,C] the collectives use.
//   all_gather_sequence:     mine [B,T/t,C] on every rank -> full [B,T,C] on every rank
//   reduce_scatter_sequence: partial full [B,T,C] on every rank -> mine = sum's [B,T/t,C]
//   keep_my_tokens:          full [B,T,C] (the same on every rank) -> mine, no communication
void all_gather_sequence(Tensor& full, const Tensor& mine, comm::Comm& tp);
void reduce_scatter_sequence(Tensor& mine, const Tensor& full, comm::Comm& tp);
void keep_my_tokens(Tensor& mine, const Tensor& full, int rank, int parts);

// Sequence parallelism's communication in a block, on group `tp`, for blocks whose shard has
// seq_parts = tp.size(): f-bar (all-gather forward, reduce-scatter backward) before the column
// linears, g-bar (reduce-scatter forward, all-gather backward) after the row linears. The column
// linear's forward and the row linear's backward, whose TP conjugates are identities, are
// exercise 06's functions (`seams`); the other two replace TP's all-reduce by a reduce-scatter,
// so they run the plain linear and SP's own collective. `sums`: as TensorParallelComm's. No
// zero-bubble split: column_backward_input throws std::logic_error.
class SequenceParallelComm : public LinearComm {
 public:
  SequenceParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums = PartialSums::fp32);
  void column_forward(const Linear& linear, Tensor& out, const Tensor& inp) override;
  void column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                       const Tensor& inp) override;
  void row_forward(const Linear& linear, Tensor& out, const Tensor& inp) override;
  void row_backward(Linear& linear, Tensor& dinp, const Tensor& dout, const Tensor& inp) override;
  void column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) override;

 private:
  Tensor full_sequence(const Tensor& mine) const;  // a [B,T,C] buffer for the rank's [B,T/t,C]
  bool sum_in_fp32(const Tensor& t) const;         // a 2-byte tensor whose partial sums go in fp32
  comm::Comm& tp_;
  TpSeams seams_;
  PartialSums sums_;
};

// One rank of a TP+SP run: TensorParallel's slices, checkpoints and optimizer, with the blocks'
// replicated regions cut along the sequence and SequenceParallelComm at the same four points.
class SequenceParallel : public TensorParallel {
 public:
  SequenceParallel(const GPTConfig& cfg, comm::Comm& tp,
                   const train::OptimizerFactory& make_optimizer, const TpSeams& seams);

  std::string name() const override { return "sequence_parallel"; }
  train::StepOutcome step(const data::Batch& global_batch, int step) override;

 private:
  // The layernorms saw only this rank's tokens: their weight/bias gradients are partial sums.
  void all_reduce_layernorm_grads();
  Tensor full_sequence(const Tensor& mine) const;  // a [B,T,C] buffer for the rank's [B,T/t,C]
};

}  // namespace mgpu::parallel

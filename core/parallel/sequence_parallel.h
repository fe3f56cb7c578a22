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

// The blocks' layernorms saw only this rank's tokens: their weight/bias gradients are partial
// sums, summed here over `tp` in one all-reduce (Megatron coalesces them too: 4*C per layer).
void all_reduce_layernorm_grads(const std::vector<Block*>& blocks, comm::Comm& tp);

// Sequence parallelism's collectives for exercise 06's linears, on group `tp`: gather is an
// all-gather along the sequence (my [B,T/t,C] -> the whole [B,T,C]), sum a reduce-scatter of the
// whole sequence's partial results to my tokens. Put where TP's are, they make f into f-bar and g
// into g-bar.
class SequenceParallelCollectives : public LinearCollectives {
 public:
  explicit SequenceParallelCollectives(comm::Comm& tp, PartialSums sums = PartialSums::fp32)
      : LinearCollectives(tp, sums) {}
  Tensor gather(const Tensor& mine) override;
  Tensor partial_buffer(const Tensor& mine) override;
  void sum(Tensor& mine, Tensor& partial) override;
};

// Sequence parallelism's communication in a block, for blocks whose shard has seq_parts =
// tp.size(): TP's four linears, exercise 06's functions (`seams`), with SP's collectives. The
// column linear's backward gathers its input again (Korthikanti et al.'s extra all-gather): the
// gathered input was dropped after the forward, as keeping it would undo what SP saves. No
// zero-bubble split: column_backward_input throws std::logic_error.
class SequenceParallelComm : public TensorParallelComm {
 public:
  SequenceParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums = PartialSums::fp32);
  void column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) override;
};

// Sequence parallelism as a part of the mesh engine: TensorParallelPart's slices and checkpoint
// writers, with the blocks' replicated regions cut along the sequence, SequenceParallelComm at the
// same four points, its own forward/backward (the cut after the embedding, the gather before the
// head) and the layernorms' partial gradients summed over tp.
class SequenceParallelPart : public TensorParallelPart {
 public:
  SequenceParallelPart(const GPTConfig& cfg, comm::Comm& tp, const TpSeams& seams);
  std::string name() const override { return "sequence_parallel"; }
  data::Batch share(const data::Batch& global_batch) override;
  std::optional<float> forward_backward(GPT& model, const data::Batch& batch, TracePhase& phase,
                                        float loss_scale) override;
  void synchronise(GPT& model) override;

 private:
  Tensor full_sequence(const Tensor& mine) const;  // a [B,T,C] buffer for the rank's [B,T/t,C]
};

// One rank of a TP+SP run: the mesh engine with the sp part (`mesh`: as tensor_parallel's).
std::unique_ptr<MeshLayout> sequence_parallel(const GPTConfig& cfg, comm::Comm& tp,
                                              const train::OptimizerFactory& make_optimizer,
                                              const TpSeams& seams,
                                              std::shared_ptr<Mesh> mesh = nullptr);

}  // namespace mgpu::parallel

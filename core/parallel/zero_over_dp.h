// ZeRO over the dp group of a mesh: the data-parallel replicas of one pipeline stage (its layers
// already cut to this rank's tp slice) keep 1/dp of the model states each, as the zero lesson
// cuts the whole model. Each layer of the stage is one flat unit; dp rank r owns chunk r of it.
//   stage 1: the optimizer state (and fp32 masters) of my chunk; after the backward the gradients
//            are reduce-scattered, my chunk updated, the parameters all-gathered (exercise 08).
//   stage 2: also the gradients: they accumulate over the micro-batches in a transient whole-unit
//            bucket, reduce-scattered into my chunk after the last one; between steps a rank
//            keeps only its chunk.
//   stage 3: (FSDP) also the parameters: the stage's units are all-gathered at the start of the
//            step and held through every micro-batch, then dropped. (Under a pipeline torchtitan's
//            FSDP does not reshard after forward either: re-gathering per micro-batch would send
//            the parameters 2M times a step.) Between steps a rank keeps only its chunk.
// Bytes each rank sends over dp per step, every stage: (d-1)/d x (fp32 gradients + parameters),
// one reduce-scatter and one all-gather: ZeRO-3's gather moves from after the update to before
// the forward.
#pragma once
#include <functional>
#include <vector>

#include "core/parallel/zero.h"

namespace mgpu::parallel {

class ZeroOverDp {
 public:
  // Materialises `layers` (the stage's, in forward order, each a list of declared parameters) as
  // flat units cut over `dp`: whole (stages 1-2) or my chunk only (stage 3).
  ZeroOverDp(int stage, comm::Comm& dp, const ZeroSeams& seams, const GPTConfig& cfg,
             std::vector<ParamList> layers);

  int stage() const { return stage_; }
  // What the optimizer updates: my slices of every unit.
  ParamList owned() const { return owned_params(owned_); }
  int64_t owned_elements() const;
  // Before the first micro-batch: stage 1 zeroes the whole gradients (the caller's zero_grad);
  // stages 2-3 open each unit's bucket; stage 3 gathers every unit.
  void begin_step();
  // After the backward of the last micro-batch and every other group's sums: the gradients
  // reduce-scattered (the mean over dp), `update` (the optimizer on my chunk; it returns whether
  // it stepped), then the parameters all-gathered (stages 1-2) or dropped (stage 3).
  bool end_step(const std::function<bool()>& update);
  // My slices (every dp rank writes its own; `writes` says which of them this rank writes at all,
  // e.g. tp rank 0's copy of a replicated tensor), and, stages 1-2, the whole local parameters a
  // resume fills too.
  std::vector<train::TensorShard> shards(optim::Optimizer* optimizer,
                                         const std::function<bool(const Param&)>& writes);

 private:
  int stage_;
  comm::Comm& dp_;
  ZeroSeams seams_;
  DType dtype_;
  std::vector<ZeroUnit> units_;
  std::vector<OwnedSlice> owned_;
};

}  // namespace mgpu::parallel

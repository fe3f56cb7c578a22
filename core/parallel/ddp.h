// DistributedDataParallel: every rank holds a full replica of the model and trains on its own
// shard of the global batch; after backward, gradients are AVERAGED across ranks with all-reduce,
// so every replica takes the same optimizer step and the replicas never drift apart. Per step
// each rank all-reduces its whole gradient once: with a ring that is 2(N-1)/N x gradient bytes
// sent per rank, independent of N. Overlap: gradients live in a few flat buckets; a bucket's
// all-reduce starts on the comm lane as soon as backward has finished all of its gradients, hiding
// communication behind the rest of backward.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/parallel/ddp_seams.h"
#include "core/parallel/mesh_layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

struct DdpOptions {
  // true: bucketed all_reduce_async issued during backward. false: after backward, one blocking
  // all-reduce per parameter tensor (the textbook version, nothing hidden).
  bool overlap = true;
  int64_t bucket_bytes = 1 << 20;  // cap on one bucket (overlap on only); must be > 0
};

class DistributedDataParallel {
 public:
  // Packs the model's gradients into buckets (exercise 02's `seams`) and makes every
  // param.grad a view into its bucket, so all-reducing a bucket reduces those gradients in place.
  // Create it before the optimizer; the model must outlive it.
  DistributedDataParallel(GPT& model, comm::Comm& comm, DdpOptions options, DdpSeams seams);

  // Forward + backward of this rank's (micro-)batch; gradients ACCUMULATE. With sync == false
  // (PyTorch's no_sync) nothing is communicated: use it for every micro-step but the last of a
  // gradient accumulation. grad_scale scales the loss gradient (1/k for k micro-steps).
  float forward_backward(const data::Batch& batch, bool sync = true, float grad_scale = 1.0f);
  // Waits for every in-flight bucket; afterwards each grad holds the mean over all ranks.
  void wait_for_gradients();

  const BucketPlan& plan() const { return plan_; }
  int64_t gradient_bytes() const;  // bytes all-reduced per synchronised step

 private:
  void backward_layer_done(const std::vector<int>& grads, bool sync);
  void launch_ready_buckets();

  GPT& model_;
  comm::Comm& comm_;
  DdpOptions options_;
  DdpSeams seams_;
  std::vector<Param*> grads_in_backward_order_;  // params, head first, embedding last
  std::vector<std::vector<int>> layer_grads_;    // backward indices per layer: head, blocks.., emb
  BucketPlan plan_;
  std::vector<Tensor> bucket_buffers_;  // one flat gradient buffer per bucket
  std::vector<bool> grad_final_;
  size_t next_bucket_ = 0;  // buckets launch in plan order: every rank issues the same sequence
  std::vector<comm::Work> in_flight_;
};

// DDP as a part of the mesh engine (core/parallel/mesh_layout.h): this rank's whole replica, DDP
// over it. Each step takes shard `shard_index` (normally the rank) of the global batch in `accum`
// micro-steps, talking only on the last one (no_sync before). Rank 0's replica is the one
// checkpoints take. `dp` must outlive the part.
class DdpPart : public MeshPart {
 public:
  DdpPart(comm::Comm& dp, DdpOptions options, int accum, int shard_index, const DdpSeams& seams);
  std::string name() const override { return "ddp"; }
  // Packs the gradients into buckets before the optimizer is made over them.
  void attach(GPT& model, TracePhase& phase) override;
  data::Batch share(const data::Batch& global_batch) override;
  std::optional<float> forward_backward(GPT& model, const data::Batch& mine, TracePhase& phase,
                                        float loss_scale) override;
  void synchronise(GPT& model) override;
  std::vector<comm::Comm*> model_groups() override { return {&dp_}; }
  bool loss_is_shard() const override { return true; }  // equal shards: their mean is the batch's
  bool writes(const Param&) const override { return dp_.rank() == 0; }
  void report(train::RankReport& report) const override;  // its buckets and last shard

  const DistributedDataParallel& ddp() const { return *ddp_; }
  const data::Batch& last_shard() const { return last_shard_; }

 private:
  comm::Comm& dp_;
  DdpOptions options_;
  int accum_, shard_index_;
  DdpSeams seams_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  data::Batch last_shard_;
};

// One rank of a DDP run: the mesh engine with the DDP part (same seed on every rank: the replicas
// start identical).
std::unique_ptr<MeshLayout> ddp_layout(const GPTConfig& config, comm::Comm& dp, DdpOptions options,
                                       int accum, const train::OptimizerFactory& make_optimizer,
                                       int shard_index, const DdpSeams& seams);

}  // namespace mgpu::parallel

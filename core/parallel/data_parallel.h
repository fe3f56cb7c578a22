// Naive single-driver data parallelism (PyTorch's nn.DataParallel), the contrast to DDP. Rank 0
// is the driver: it owns the only optimizer and the master weights. Every step it
//   1. scatters the global batch: sends each replica its shard (point-to-point),
//   2. broadcasts every parameter to the replicas (they keep no state between steps),
//   3. runs forward/backward on its own shard while the replicas run theirs,
//   4. receives every replica's gradients and sums them (a reduce to rank 0),
//   5. averages and takes the optimizer step, alone, while the replicas wait.
// Per step rank 0 sends the whole model (N-1) times and receives N-1 whole gradients: its traffic
// grows with N while a DDP rank's stays 2(N-1)/N x gradient bytes.
#pragma once
#include <optional>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

class DataParallel {
 public:
  // `model` is rank 0's master copy, or a replica elsewhere; the model must outlive this object.
  DataParallel(GPT& model, comm::Comm& comm);

  // One training step up to the optimizer: on rank 0 the summed, averaged gradients. Rank 0
  // passes the global batch; replicas pass nothing (they learn their shard from rank 0). The
  // loss is multiplied by grad_scale before backward (fp16 loss scaling). Returns the mean loss
  // over the global batch on rank 0 and the replica's shard loss elsewhere. Throws
  // std::invalid_argument (on rank 0) when the batch does not divide over the ranks.
  float forward_backward(const data::Batch* global_batch, float grad_scale = 1.0f);

 private:
  data::Batch scatter_batch(const data::Batch* global_batch);
  void broadcast_parameters();
  float reduce_gradients_to_driver(float my_loss);

  GPT& model_;
  comm::Comm& comm_;
};

// The naive scheme as the trainer runs it. Rank 0 holds the master model and the only optimizer
// (its copy is the checkpoint's); the replicas get fresh weights every step and keep nothing.
class DataParallelLayout : public train::Layout {
 public:
  DataParallelLayout(const GPTConfig& config, comm::Comm& comm,
                     const train::OptimizerFactory& make_optimizer);
  std::string name() const override { return "data_parallel"; }
  train::StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<train::TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  void report(train::RankReport& report) override;
  GPT& model() { return model_; }

 private:
  comm::Comm& comm_;
  GPT model_;
  DataParallel dp_;
  std::unique_ptr<optim::Optimizer> optimizer_;  // rank 0 only
};

}  // namespace mgpu::parallel

// A layout is a parallel paradigm as the one training loop (core/train/trainer.h) sees it, on one
// rank: it holds this rank's part of the model and optimizer, runs one optimizer step on the
// global batch, and says where each of its tensors sits in the full single-device model. That map
// is what makes every checkpoint the gathered full model in the single-device format, and lets
// any layout resume from any other layout's checkpoint.
//
// Three engines implement it (core/parallel: MeshLayout and its parts, HybridLayout, the naive
// DataParallelLayout); a run spec's factory builds one on each rank (core/run/run.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/task.h"
#include "core/model/param.h"
#include "core/optim/mixed_precision.h"
#include "core/tensor/tensor.h"
#include "core/train/rank_report.h"

namespace mgpu::comm {
class Comm;
}

namespace mgpu::train {

using mgpu::ShardRun;

// One tensor a rank holds, and where its elements live in the full model's tensor of the same
// name. The local tensor's elements, in order, are the concatenation of `runs` (a parameter's
// PartitionSpec, core/model/param.h). Only one rank should be `writer` for each element (replicas:
// the first one), so the gathered checkpoint takes one copy.
struct TensorShard {
  std::string full_name;  // "blocks.0.attn.qkv.weight", "adamw.m.blocks.0.attn.qkv.weight"
  std::string kind;       // "param" or "optimizer_state"
  Shape full_shape;
  std::vector<ShardRun> runs;
  Tensor local;  // this rank's tensor (a parameter's data or an optimizer state tensor)
  bool writer = true;
};

struct StepOutcome {
  std::optional<float> loss;  // the global batch's mean loss, on the ranks that know it
  // This rank's mean loss over its equal share of the batch, when no rank knows the global one
  // (DDP): the trainer averages the shares over the ranks.
  std::optional<float> shard_loss;
  bool skipped = false;  // no update this step (e.g. the fp16 loss scaler found inf/nan)
};

// fp16's dynamic loss scaling, which the trainer turns on in a layout (TrainOptions::loss_scaling).
struct LossScaling {
  optim::LossScalerOptions scaler;  // start 2^16, x2 after 2000 clean steps, /2 on inf/NaN
  // Called on every rank with the step and its optimizer (null on a rank without one) just before
  // the found-inf check, after any gradient all-reduce: what a rank's gradients hold there is what
  // the flag's all-reduce decides on (tests plant an overflow on one rank here).
  std::function<void(int step, optim::Optimizer* optimizer)> before_found_inf;
};

class Layout {
 public:
  virtual ~Layout() = default;
  virtual std::string name() const = 0;
  // One optimizer step on the global batch (the layout takes this rank's share of it): forward,
  // backward, gradient synchronisation and the optimizer update.
  virtual StepOutcome step(const data::Batch& global_batch, int step) = 0;
  // Runs before each step, outside its window on the timeline (a pipeline's barrier, so every
  // stage starts the step together and its bubble is measured from a common start).
  virtual void before_step(int step) { (void)step; }
  // This rank's parameters and optimizer state, each mapped into the full model.
  virtual std::vector<TensorShard> shards() = 0;
  // The optimizer (hyper-parameters and step count for checkpoints), or null on ranks without
  // one (e.g. naive data parallel's non-driver ranks).
  virtual optim::Optimizer* optimizer() = 0;
  // This rank's figures for the run's report, after the last step: its parameter counts and its
  // parts' own figures (the trainer has filled in the allocator's and the clock's).
  virtual void report(RankReport& report) { (void)report; }

  // fp16: the trainer turns dynamic loss scaling on before the first step. A layout supports it
  // by multiplying its loss by loss_scale() and ending its step with optimizer_step(); the
  // trainer refuses a layout that never calls it.
  void enable_loss_scaling(const LossScaling& options);
  optim::LossScaler* loss_scaler() { return scaler_.get(); }  // null when off
  int64_t optimizer_steps_called() const { return optimizer_steps_called_; }

 protected:
  // What to multiply the loss by before backward: the loss scale (fp16), else 1.
  float loss_scale() const;
  // The end of every layout's step, in an "optimizer" scope. With loss scaling: the found-inf
  // flag agreed over `model_groups` (every group holding parts of the model: dp, pp, tp), then
  // unscale and step, or skip on every rank together. Without it: the optimizer step. A rank
  // without an optimizer (null) still takes part in the agreement. False: the step was skipped.
  bool optimizer_step(optim::Optimizer* optimizer, const std::vector<comm::Comm*>& model_groups,
                      int step);

 private:
  std::unique_ptr<optim::LossScaler> scaler_;
  std::function<void(int, optim::Optimizer*)> before_found_inf_;
  int64_t optimizer_steps_called_ = 0;
};

}  // namespace mgpu::train

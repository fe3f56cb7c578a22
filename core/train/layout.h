// A layout is a parallel paradigm as the one training loop (core/train/trainer.h) sees it, on one
// rank: it holds this rank's part of the model and optimizer, runs one optimizer step on the
// global batch, and says where each of its tensors sits in the full single-device model. That map
// is what makes every checkpoint the gathered full model in the single-device format, and lets
// any layout resume from any other layout's checkpoint.
//
// A new paradigm plugs in by implementing Layout (in core/parallel/<paradigm>.cpp) and handing the
// trainer a factory that builds it on each rank; the lesson only configures and narrates.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data/task.h"
#include "core/tensor/tensor.h"

namespace mgpu::optim {
class Optimizer;
}

namespace mgpu::train {

// A run of consecutive elements of a full tensor (flattened row-major).
struct ShardRun {
  int64_t full_offset = 0;
  int64_t length = 0;
};

// One tensor a rank holds, and where its elements live in the full model's tensor of the same
// name. The local tensor's elements, in order, are the concatenation of `runs`. Examples:
//   replicated (DDP, a layernorm under TP)      runs = {{0, numel}}
//   column-parallel rows [r0, r1) of [out, in]  runs = {{r0 * in, (r1 - r0) * in}}
//   row-parallel columns [c0, c1) of [out, in]  one run per row: {{row * in + c0, c1 - c0}}
//   a ZeRO flat shard                           runs = {{begin, end - begin}}
// Only one rank should be `writer` for each element (replicas: the first one), so the gathered
// checkpoint takes one copy.
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
};

}  // namespace mgpu::train

#include "core/train/single_device.h"

#include "core/runtime/context.h"
#include "core/train/trainer.h"

namespace mgpu::train {

SingleDeviceLayout::SingleDeviceLayout(const GPTConfig& config,
                                       const OptimizerFactory& make_optimizer)
    : model_(config), optimizer_(make_optimizer(model_.params())) {}

// One training step: forward, backward, optimizer. Each phase is a scope on the timeline.
StepOutcome SingleDeviceLayout::step(const data::Batch& batch, int) {
  model_.zero_grad();
  GPTActivations acts = GPTActivations::allocate(model_.config(), batch.B, batch.T);
  float loss;
  {
    ComputeScope s({.name = "forward", .cat = trace::cat::forward});
    loss = model_.forward(batch.tokens, batch.targets, acts);
  }
  {
    ComputeScope s({.name = "backward", .cat = trace::cat::backward});
    model_.backward(batch.tokens, acts);
  }
  {
    ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
    optimizer_->step();
  }
  return {.loss = loss};
}

std::vector<TensorShard> SingleDeviceLayout::shards() {
  return whole_tensor_shards(model_.params(), optimizer_.get(), /*writer=*/true);
}

}  // namespace mgpu::train

#include "core/train/single_device.h"

#include "core/runtime/context.h"
#include "core/train/trainer.h"

namespace mgpu::train {

SingleDeviceLayout::SingleDeviceLayout(const GPTConfig& config,
                                       const OptimizerFactory& make_optimizer)
    : model_(config), optimizer_(make_optimizer(model_.params())) {}

float forward_backward_traced(GPT& model, const data::Batch& batch, float grad_scale,
                              StoreCounters* backward_stores) {
  model.zero_grad();
  GPTActivations acts = GPTActivations::allocate(model.config(), batch.B, batch.T);
  float loss;
  {
    ComputeScope s({.name = "forward", .cat = trace::cat::forward});
    loss = model.forward(batch.tokens, batch.targets, acts, grad_scale);
  }
  {
    ComputeScope s({.name = "backward", .cat = trace::cat::backward});
    const StoreCounters before = store_counters();  // per thread: this rank's stores only
    model.backward(batch.tokens, acts);
    if (backward_stores) {
      backward_stores->flushed_to_zero += store_counters().flushed_to_zero - before.flushed_to_zero;
      backward_stores->overflowed_to_inf +=
          store_counters().overflowed_to_inf - before.overflowed_to_inf;
      backward_stores->unchecked += store_counters().unchecked - before.unchecked;
    }
  }
  return loss;
}

// One training step: forward, backward, optimizer (fp16: with the loss scaled, or skipped).
StepOutcome SingleDeviceLayout::step(const data::Batch& batch, int step) {
  const float loss = forward_backward_traced(model_, batch, loss_scale(), &backward_stores_);
  const bool stepped = optimizer_step(optimizer_.get(), /*model_groups=*/{}, step);
  return {.loss = loss, .skipped = !stepped};
}

std::vector<TensorShard> SingleDeviceLayout::shards() {
  return whole_tensor_shards(model_.params(), optimizer_.get(), /*writer=*/true);
}

}  // namespace mgpu::train

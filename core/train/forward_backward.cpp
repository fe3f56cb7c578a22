#include "core/train/forward_backward.h"

#include "core/runtime/context.h"

namespace mgpu::train {

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

}  // namespace mgpu::train

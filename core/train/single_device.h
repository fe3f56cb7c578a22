// The single-device layout: one rank holds the whole model and its optimizer, and runs forward,
// backward and the optimizer step on the whole global batch. No communication at all; it is the
// reference every other layout must reproduce, and its shards are the full model as is.
#pragma once
#include <functional>
#include <memory>

#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"

namespace mgpu::train {

// The compute of one step on a whole model, shared by the layouts that hold one: zero the
// gradients, allocate the activations, forward (loss * grad_scale seeds the backward) and
// backward, each a scope on the timeline. Returns the mean loss over the batch. With
// `backward_stores`, what the backward's 2-byte stores rounded (flushed to zero, overflowed to
// inf) is added to it: fp16's lost gradients, counted.
float forward_backward_traced(GPT& model, const data::Batch& batch, float grad_scale = 1.0f,
                              StoreCounters* backward_stores = nullptr);

class SingleDeviceLayout : public Layout {
 public:
  SingleDeviceLayout(const GPTConfig& config, const OptimizerFactory& make_optimizer);
  std::string name() const override { return "single_device"; }
  StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  GPT& model() { return model_; }
  // Summed over the steps run: the backward's stores that rounded to 0 or inf (bf16/fp16).
  const StoreCounters& backward_stores() const { return backward_stores_; }

 private:
  GPT model_;
  StoreCounters backward_stores_;
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace mgpu::train

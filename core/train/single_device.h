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

class SingleDeviceLayout : public Layout {
 public:
  SingleDeviceLayout(const GPTConfig& config, const OptimizerFactory& make_optimizer);
  std::string name() const override { return "single_device"; }
  StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  GPT& model() { return model_; }

 private:
  GPT model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace mgpu::train

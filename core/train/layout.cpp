// The loss-scaling end of a step that every layout shares (layout.h): fp16 training multiplies
// the loss by S before backward, and here the fp32 gradients are checked, unscaled and stepped,
// or the step is skipped on every rank of the model together.
#include "core/train/layout.h"

#include "core/optim/optimizer.h"
#include "core/runtime/context.h"

namespace mgpu::train {

void Layout::enable_loss_scaling(const LossScaling& options) {
  scaler_ = std::make_unique<optim::LossScaler>(options.scaler);
  before_found_inf_ = options.before_found_inf;
}

float Layout::loss_scale() const {
  return scaler_ ? scaler_->scale() : 1.0f;
}

bool Layout::optimizer_step(optim::Optimizer* optimizer,
                            const std::vector<comm::Comm*>& model_groups, int step) {
  ++optimizer_steps_called_;
  if (!scaler_ && !optimizer) return true;  // nothing to do here: no event on the timeline
  ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
  if (!scaler_) {
    optimizer->step();
    return true;
  }
  if (before_found_inf_) before_found_inf_(step, optimizer);
  if (optimizer) return scaler_->step(*optimizer, model_groups);
  // No optimizer here (naive data parallel's replicas): agree on the flag, keep the same scale.
  return scaler_->update(optim::LossScaler::found_inf({}, model_groups));
}

}  // namespace mgpu::train

#include "core/parallel/single_device.h"

#include "core/train/forward_backward.h"

namespace mgpu::parallel {

// One training step's compute: forward and backward on the whole batch (the engine then steps
// the optimizer; fp16: with the loss scaled, or skipped).
std::optional<float> SingleDevicePart::forward_backward(GPT& model, const data::Batch& batch,
                                                        TracePhase&, float loss_scale) {
  return train::forward_backward_traced(model, batch, loss_scale, &backward_stores_);
}

std::vector<train::TensorShard> SingleDevicePart::shards(GPT& model, optim::Optimizer* optimizer) {
  return train::whole_tensor_shards(model.params(), optimizer, /*writer=*/true);
}

std::unique_ptr<MeshLayout> single_device_layout(const GPTConfig& config,
                                                 const train::OptimizerFactory& make_optimizer) {
  return std::make_unique<MeshLayout>(config, std::make_unique<SingleDevicePart>(), make_optimizer);
}

}  // namespace mgpu::parallel

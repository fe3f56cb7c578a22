// The single device: one rank holds the whole model and its optimizer, and runs forward, backward
// and the optimizer step on the whole global batch. No communication at all; it is the reference
// every other layout must reproduce, and its shards are the full model as is. As a part of the
// mesh engine it is the mesh with every axis 1.
#pragma once
#include <memory>
#include <string>

#include "core/parallel/mesh_layout.h"

namespace mgpu::parallel {

class SingleDevicePart : public MeshPart {
 public:
  std::string name() const override { return "single_device"; }
  void attach(GPT&, TracePhase&) override {}
  void zero_grad(GPT&, optim::Optimizer&) override {}  // forward_backward zeroes the model's
  std::optional<float> forward_backward(GPT& model, const data::Batch& batch, TracePhase& phase,
                                        float loss_scale) override;
  std::vector<comm::Comm*> model_groups() override { return {}; }
  bool writes(const Param&) const override { return true; }
  std::vector<train::TensorShard> shards(GPT& model, optim::Optimizer* optimizer) override;
  void report(train::RankReport& report) const override {  // the backward's 2-byte stores
    report.stores = train::StoreFigures{.flushed_to_zero = backward_stores_.flushed_to_zero,
                                        .unchecked = backward_stores_.unchecked};
  }

  // Summed over the steps run: the backward's stores that rounded to 0 or inf (bf16/fp16).
  const StoreCounters& backward_stores() const { return backward_stores_; }

 private:
  StoreCounters backward_stores_;
};

// One rank with the whole model: the mesh engine with the single-device part.
std::unique_ptr<MeshLayout> single_device_layout(const GPTConfig& config,
                                                 const train::OptimizerFactory& make_optimizer);

}  // namespace mgpu::parallel

// Optimizers: SGD (momentum) and AdamW over a list of parameters.
//
// An optimizer updates *slices* of parameters: a ParamSlice is a flat element range of one Param.
// Built from a ParamList, every slice is a whole parameter. A sharded optimizer (ZeRO) builds it
// from the slices its rank owns, so the state it allocates (and the memory lesson shows) is only
// that rank's share: AdamW keeps 8 bytes per owned element (m and v), SGD momentum 4.
//
// State is allocated at construction, tagged MemCategory::optimizer_state, so a run's memory
// breakdown shows the optimizer's share before the first step (and OOMs happen up front).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/param.h"

namespace mgpu::optim {

// Elements [begin, end) of param->data (flattened) and of its gradient.
struct ParamSlice {
  Param* param = nullptr;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
  bool whole() const { return begin == 0 && end == param->data.numel(); }
  Tensor data() const { return param->data.flat_range(begin, end); }
  Tensor grad() const { return param->grad.flat_range(begin, end); }
};

// Every parameter as one whole slice.
std::vector<ParamSlice> whole_params(const ParamList& params);

// A named state tensor, e.g. {"adamw.m.blocks.0.attn.qkv.weight", m}. A slice that is not a whole
// parameter appends its range: "adamw.m.wte.weight[0:512]".
struct NamedTensor {
  std::string name;
  Tensor tensor;
  int slice = -1;  // the optimizer's slice (slices()[slice]) this state belongs to
};

class MixedPrecision;

class Optimizer {
 public:
  Optimizer(std::vector<ParamSlice> slices, float lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;  // "sgd", "adamw"
  // One update of every slice from its gradient; increments step_count() first.
  virtual void step();
  // Zeroes the gradients of every parameter this optimizer touches (whole gradients: after a
  // sharded step the rest of the gradient is stale too).
  void zero_grad();

  // State tensors in a fixed order, for checkpoints and memory lessons.
  const std::vector<NamedTensor>& state() const { return state_; }
  int64_t state_bytes() const;
  // Hyper-parameters as JSON (name, lr, betas, ...) for checkpoints and run summaries.
  virtual nlohmann::json hyperparams() const = 0;
  // Mixed precision's fp32 master weights stand apart from the model's parameters (checkpoints
  // store and restore them): MixedPrecision returns itself, every other optimizer null.
  virtual MixedPrecision* mixed_precision() { return nullptr; }

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }  // when resuming from a checkpoint
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }  // schedules call this before step()
  const std::vector<ParamSlice>& slices() const { return slices_; }

 protected:
  // Updates slice `i` (its state tensors were created by add_state in slice order).
  virtual void update_slice(size_t i) = 0;
  // Allocates a zeroed optimizer_state tensor for slice `i`, named "<prefix>.<param name>".
  Tensor add_state(const std::string& prefix, size_t i);

  std::vector<ParamSlice> slices_;
  std::vector<NamedTensor> state_;
  float lr_;
  int64_t step_count_ = 0;
};

struct SGDOptions {
  float lr = 0.1f;
  float momentum = 0.9f;      // 0 = plain SGD, no state
  float weight_decay = 0.0f;  // classic L2 (added to the gradient)
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamSlice> slices, SGDOptions options = {});
  SGD(const ParamList& params, SGDOptions options = {}) : SGD(whole_params(params), options) {}
  std::string name() const override { return "sgd"; }
  nlohmann::json hyperparams() const override;

 private:
  void update_slice(size_t i) override;
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // one per slice (undefined when momentum == 0)
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // decoupled
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamSlice> slices, AdamWOptions options = {});
  AdamW(const ParamList& params, AdamWOptions options = {})
      : AdamW(whole_params(params), options) {}
  std::string name() const override { return "adamw"; }
  nlohmann::json hyperparams() const override;

 private:
  void update_slice(size_t i) override;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;  // first and second moments, one per slice
};

}  // namespace mgpu::optim

// Mixed-precision training: the model computes with bf16/fp16 parameters and activations, but
// small updates (lr * m / sqrt(v), often < 2^-8 of a weight) would vanish if added to a 2-byte
// weight. So the optimizer keeps an fp32 copy of every parameter (the master weights), updates
// that copy with the fp32 gradients, and rounds it back into the model after each step.
//
// Memory per parameter with AdamW: model 2 (bf16/fp16) + gradient 4 (fp32: accumulated across
// micro-batches and all-reduced in fp32) + optimizer 12 (master 4 + m 4 + v 4: the ZeRO paper's
// K = 12) = 18 bytes, against 4 + 4 + 8 = 16 in fp32.
//
// fp16's narrow range (5 exponent bits) loses small gradients to zero: LossScaler multiplies the
// loss by S (so every backward value is S times larger), divides the fp32 gradients by S before
// the step, and adapts S: halve and skip the step on inf/NaN, double after 2000 clean steps.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/optim/optimizer.h"

namespace mgpu::comm {
class Comm;
}

namespace mgpu::optim {

class MixedPrecision : public Optimizer {
 public:
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamSlice>)>;
  // `slices` of the model's (bf16/fp16/f32) parameters, whose gradients must be fp32. `make_inner`
  // builds the real optimizer over the fp32 master copies (e.g. AdamW).
  MixedPrecision(std::vector<ParamSlice> slices, const Factory& make_inner);

  std::string name() const override { return inner_->name(); }
  nlohmann::json hyperparams() const override;  // the inner optimizer's + "master_weights"
  MixedPrecision* mixed_precision() override { return this; }
  // inner step on the masters, then every master rounded back into the model's parameters.
  void step() override;

  // The fp32 master weights, named and shaped like the model's parameters (slices that are not
  // whole parameters are 1-D and named "name[begin:end]"): what checkpoints store.
  ParamList master_params();
  // After the masters were loaded (a checkpoint resume): round them into the model again.
  void copy_master_to_model();
  Optimizer& inner() { return *inner_; }

 private:
  void update_slice(size_t) override {}
  std::vector<std::unique_ptr<Param>> masters_;  // data: fp32 copy; grad: view of model grad
  std::unique_ptr<Optimizer> inner_;
};

// The usual wrapping: AdamW over fp32 master weights when `precision` is bf16/f16, plain AdamW
// when it is f32. The one call a training loop needs for --precision.
std::unique_ptr<Optimizer> make_adamw(std::vector<ParamSlice> slices, DType precision,
                                      AdamWOptions options = {});

struct LossScalerOptions {
  float initial_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;  // clean steps before the scale grows
};

// Dynamic loss scaling (fp16). Per step:
//   loss = model.forward(..., grad_scale = scaler.scale());  backward;
//   if (scaler.step(optimizer, groups)) { stepped } else { skipped: scale halved }
class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});
  float scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }
  int64_t clean_steps() const { return clean_; }

  // True when any gradient of `slices` holds inf or NaN on this rank or on any rank of `groups`
  // (a flag all-reduced over each group in turn: pass every group that holds parts of the model,
  // e.g. dp, tp and pp, so all ranks agree and skip the same step).
  static bool found_inf(const std::vector<ParamSlice>& slices,
                        const std::vector<comm::Comm*>& groups);
  // Records the outcome of a step and adapts the scale; returns true when the step may be taken.
  bool update(bool found_inf);
  // found_inf -> update -> (when clean) gradients *= 1/scale and optimizer.step(). Returns whether
  // the optimizer stepped. Gradients are left as they were when the step is skipped.
  bool step(Optimizer& optimizer, const std::vector<comm::Comm*>& groups = {});

  // What a checkpoint keeps so a resumed run continues bit for bit: {"scale", "good_steps",
  // "skipped_steps"}; load_state reads it back (throws std::invalid_argument on a bad one).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LossScalerOptions options_;
  float scale_;
  int64_t clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace mgpu::optim

// STAND-IN (swap for core/train's trainer at merge): the small single-device loop that the
// mixed_precision and activation_checkpointing lessons and their tests run. It does what the
// trainer does for --precision and --recompute: GPTConfig.dtype / .recompute for the model,
// optim::make_adamw for fp32 master weights, optim::LossScaler for fp16.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/runtime/profile.h"
#include "core/tensor/allocator.h"

namespace mgpu::lessons {

struct PrecisionRunOptions {
  GPTConfig model;  // model.dtype and model.recompute select the precision and recompute mode
  int steps = 150;
  int batch = 16;
  float lr = 3e-3f;
  float weight_decay = 0.01f;  // AdamW's decoupled weight decay (--weight-decay)
  bool loss_scaling = false;  // dynamic loss scaling (start 2^16)
  float initial_scale = 65536.0f;
  HardwareProfile profile = HardwareProfile::ideal(0);
  Device device = Device::cpu();  // cpu or phantom (phantom: timing and memory only)
  int64_t capacity = 0;           // bytes; 0 = unlimited
};

struct PrecisionRun {
  std::vector<float> losses;
  int64_t params = 0;
  int64_t skipped_steps = 0;        // loss scaler: steps skipped on inf/NaN
  int64_t flushed_in_backward = 0;  // backward stores of nonzero values that rounded to 0
  int64_t zero_weight_grads = 0;    // weight-gradient elements exactly 0 after the last backward
  float final_scale = 0;            // loss scale after the last step (1 without scaling)
  double modeled_step_seconds = 0;  // modeled clock, mean per step
  double recompute_seconds = 0;     // modeled time spent in "recompute" scopes, per step
  MemoryStats memory;               // allocator peaks over the run
  std::vector<float> final_params;  // the fp32 master weights (model's when fp32), concatenated
};

// Trains on `task` for options.steps steps; throws OutOfMemory when capacity is exceeded.
PrecisionRun train_precision_run(const PrecisionRunOptions& options, const data::Task& task);

struct CommonOptions;
// Run options from the common ones; refuses (UsageError) what this stand-in loop does not do:
// more than one rank, --device cuda, a non-modeled clock, checkpoints, traces, sgd.
PrecisionRunOptions precision_run_options(const CommonOptions& c, const data::Task& task);

class Lesson;
std::unique_ptr<Lesson> make_mixed_precision_lesson();
std::unique_ptr<Lesson> make_activation_checkpointing_lesson();

}  // namespace mgpu::lessons

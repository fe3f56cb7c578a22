// Internal to the trainer: the divergence check after each step, defined in
// trainer_divergence.cpp and called by the training loop in trainer.cpp.
#pragma once
#include "core/model/checkpoint.h"
#include "core/train/layout.h"
#include "core/train/trainer.h"

namespace mgpu::train::trainer_detail {

void check_finite(int step, const StepOutcome& outcome, Layout& layout, const TrainOptions& options,
                  const CheckpointContents& resumed);

}  // namespace mgpu::train::trainer_detail

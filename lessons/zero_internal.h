// What the ZeRO lesson's run (zero_run.cpp) and its report (zero.cpp) both read: the bytes per
// parameter of each model state, for the formulas beside the measurements.
#pragma once
#include "core/theory/model_states.h"
#include "lessons/lesson.h"

namespace mgpu::lessons::detail {

theory::StateBytes state_bytes(const CommonOptions& c, int param_bytes);

}  // namespace mgpu::lessons::detail

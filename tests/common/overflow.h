// Planting an fp16 overflow on chosen ranks at chosen steps, through the layout's
// before_found_inf hook: the rank's first gradient element becomes inf just before the found-inf
// check, so only the flag's all-reduce can make the other ranks skip with it.
#pragma once
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/runtime/context.h"
#include "core/train/layout.h"

namespace mgpu::testing {

// Loss scaling whose gradients overflow at each (step, global rank) pair.
inline train::LossScaling overflow_at(std::vector<std::pair<int, int>> steps_and_ranks) {
  train::LossScaling scaling;
  scaling.before_found_inf = [at = std::move(steps_and_ranks)](int step, optim::Optimizer* opt) {
    const std::pair<int, int> here{step, current_rank().rank};
    if (std::find(at.begin(), at.end(), here) == at.end()) return;
    if (opt && !opt->slices().empty() && opt->slices()[0].grad().has_data())
      opt->slices()[0].grad().flat_range(0, 1).fill(std::numeric_limits<float>::infinity());
  };
  return scaling;
}

}  // namespace mgpu::testing

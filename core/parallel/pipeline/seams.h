// Exercise seam for pipeline schedules (exercise 03). The compute ORDER of GPipe and 1F1B is what
// a student writes; core does not hold the reference copy. solutions/ holds it, exercises/ the
// student's stubs. gpipe_schedule, one_f_one_b_schedule and make_schedule take the table to call
// (schedule.h) and add the messages with with_communication.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/parallel/pipeline/schedule.h"

namespace mgpu::pipeline {

// (stages, microbatches) -> per-stage compute actions in execution order (no send/recv).
using ComputeOrderFn =
    std::function<std::vector<std::vector<Action>>(int stages, int microbatches)>;

struct PipelineSeams {
  std::string impl_name;  // "reference" or "mine"
  ComputeOrderFn gpipe;
  ComputeOrderFn one_f_one_b;
};

}  // namespace mgpu::pipeline

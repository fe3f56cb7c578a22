// Reference compute orders for GPipe and 1F1B (exercise 03:
// docs/exercises/03-pipeline-schedules.md).
//
// A schedule is, per stage, the order of its forwards (F) and backwards (B) of micro-batches; the
// messages (activations down the pipe, gradients back up) are added by with_communication. Both
// schedules do the same work and have the same bubble, (P-1)/(M+P-1); they differ in memory:
// GPipe holds all M micro-batches' activations at the turn, 1F1B at most P-s on stage s.
#include "core/parallel/pipeline/schedule.h"
#include "exercises/exercises.h"

#include <algorithm>

namespace mgpu::reference {

using pipeline::Action;

// GPipe: every stage runs all forwards, then all backwards.
std::vector<std::vector<Action>> gpipe_compute_order(int stages, int microbatches) {
  std::vector<std::vector<Action>> compute(stages);
  for (auto& list : compute) {
    for (int mb = 0; mb < microbatches; ++mb) list.push_back(pipeline::forward(mb));
    for (int mb = 0; mb < microbatches; ++mb) list.push_back(pipeline::backward(mb));
  }
  return compute;
}

// 1F1B (PipeDream-Flush, Megatron): stage s runs P-s-1 warmup forwards, then alternates one
// forward and one backward, then drains the remaining backwards. A backward frees its
// micro-batch's activations, so stage s never holds more than P-s of them.
std::vector<std::vector<Action>> one_f_one_b_compute_order(int stages, int microbatches) {
  std::vector<std::vector<Action>> compute(stages);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = compute[stage];
    const int warmup = std::min(stages - stage - 1, microbatches);
    for (int mb = 0; mb < warmup; ++mb) list.push_back(pipeline::forward(mb));
    for (int i = 0; i < microbatches - warmup; ++i) {
      list.push_back(pipeline::forward(warmup + i));
      list.push_back(pipeline::backward(i));
    }
    for (int mb = microbatches - warmup; mb < microbatches; ++mb)
      list.push_back(pipeline::backward(mb));
  }
  return compute;
}

// ZB-V: the reference is the lesson's own generator (core/parallel/pipeline/schedule_v.cpp, which
// explains its phases), without the messages.
std::vector<std::vector<Action>> zbv_compute_order(int stages, int microbatches) {
  const pipeline::Schedule schedule = pipeline::zbv_schedule(stages, microbatches);
  std::vector<std::vector<Action>> compute;
  for (int stage = 0; stage < stages; ++stage) compute.push_back(schedule.compute_actions(stage));
  return compute;
}

}  // namespace mgpu::reference

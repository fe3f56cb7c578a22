// The expert-parallel lesson's run and its measurements, callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct ExpertParallelOptions {
  int ep = 0;         // ranks per expert-parallel group; 0 = every rank (--ep)
  double skew = 4.0;  // the second act's tilt of expert 0's probability; 1 = no second act
};

struct ExpertParallelResult {
  std::vector<float> losses;  // one per step run
  GPTConfig config;           // the model trained (its expert fields resolved from the options)
  int ep = 1, dp = 1;
  trace::Trace trace;
};

// Trains the options' MoE model with expert parallelism: dp = --ranks data-parallel ranks, experts
// split over groups of `ep` of them. `skew` > 1 routes on probabilities with expert 0's multiplied
// by it (renormalised). Throws UsageError / std::invalid_argument for impossible sizes.
ExpertParallelResult train_expert_parallel(const CommonOptions& c, const ExpertParallelOptions& o,
                                           double skew, std::ostream& out);

std::unique_ptr<Lesson> make_expert_parallel_lesson();

}  // namespace mgpu::lessons

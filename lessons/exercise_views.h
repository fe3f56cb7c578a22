// What a lesson shows through the exercise seams, so that `--impl mine` puts the student's code
// in front of them: the pipeline lesson's measured bubbles come from exercise 04's accounting,
// the memory predictions of single_device (and later zero) from exercise 05's estimator. Each
// function says whose implementation produced the figure.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "core/memory/seams.h"
#include "core/model/gpt.h"
#include "core/runtime/allocator.h"
#include "core/runtime/trace_event.h"

namespace mgpu::lessons {

// Bubble fraction per rank in `step`'s window (trace/analysis.h defines the window), computed
// by the installed bubble accounting (exercise 04).
std::vector<double> measured_bubble_fractions(const trace::Trace& trace, int step);

// "exercise 04's bubble accounting (reference)" (or "(yours)"): whose code the fractions above
// come from, for the bubble table's heading.
std::string bubble_accounting_credit();

// The memory estimator's question for one rank of a run.
struct MemoryRun {
  GPTConfig model;
  std::string optimizer = "adamw";  // the estimator models AdamW; sgd's state is not predicted
  memory::Precision precision = memory::Precision::fp32;
  int dp = 1;
  int zero_stage = 0;
};

// Predicted bytes per category (exercise 05's parameter count and estimate) beside the
// allocator's measured peaks of one rank, with the per-parameter formula:
//   predicted (exercise 05's memory estimator, reference), 12,345 parameters:
//     parameters       48.2 KiB = 12,345 x 4 B       measured 48.2 KiB
//     ...
void print_memory_prediction(std::ostream& out, const MemoryRun& run, const MemoryStats& measured);

}  // namespace mgpu::lessons

// Exercise seam for bubble accounting (exercise 04: docs/exercises/04-bubble-accounting.md).
// How much of a window each rank sat idle is what a pipeline lesson's bubble table reports. The
// student re-implements it: core declares the signature here, solutions/ holds the reference,
// exercises/ the student's version, and the program hands the lessons the one `--impl` selects,
// so a student's accounting fills the pipeline lesson's "measured" column.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::trace {

// One rank's time within a window [t0, t1].
struct RankIdle {
  int rank = 0;
  double busy = 0;  // length of the union of the rank's compute-lane events in the window
  double idle = 0;  // (t1 - t0) - busy
  double bubble_fraction = 0;  // idle / (t1 - t0); 0 when the window is empty
};

// (trace, t0, t1) -> one entry per rank 0..trace.num_ranks-1.
using BubbleAccountingFn =
    std::function<std::vector<RankIdle>(const Trace& trace, double t0, double t1)>;

struct BubbleSeams {
  std::string impl_name;  // "reference" or "mine"
  BubbleAccountingFn bubble_accounting;
};

}  // namespace mgpu::trace

// Types the graded exercises exchange with their callers. They live outside the two namespaces
// (mgpu::reference, mgpu::mine) so that the student's results and the reference's compare
// directly and either implementation can be handed to the same caller. The types a core seam
// carries are defined beside that seam and only named here.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/memory/seams.h"
#include "core/trace/bubble_seams.h"

namespace mgpu::ex {

// Exercise 04: one rank's time within a window [t0, t1] (core/trace/bubble_seams.h).
using trace::RankIdle;

// Exercise 05: how training state is stored and sharded, and what one rank holds
// (core/memory/seams.h).
using memory::MemoryEstimate;
using memory::MemoryQuery;
using memory::Precision;

// What an exercise stub throws until it is written. `--impl mine` probes every exercise with a
// tiny call and falls back to the reference, saying so, for each one that still throws this.
class NotImplemented : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// One graded exercise as the program sees it.
struct Exercise {
  std::string name;               // "ex01"
  std::string title;              // "ring all-reduce"
  std::function<void()> install;  // puts this side's functions into core's seam
  std::function<void()> probe;    // a tiny call; throws NotImplemented while still a stub
};

}  // namespace mgpu::ex

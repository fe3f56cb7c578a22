// The tensor-parallel lesson's run, callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/tensor/allocator.h"
#include "core/trace/event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct TensorParallelResult {
  std::vector<float> losses;  // one per step run (rank 0)
  int64_t local_params = 0;   // parameters held by tp rank 0
  double step_seconds = 0;    // the last step on rank 0's clock
  MemoryStats memory;         // rank 0, peaks from after set-up
  trace::Trace trace;
  bool under_mpi = false;  // ranks were processes (mpirun)
};

// Trains with tensor parallelism over --ranks ranks (tp = ranks). Throws UsageError /
// std::invalid_argument for impossible configurations, RankError(OutOfMemory) when it does not fit.
TensorParallelResult train_tensor_parallel(const CommonOptions& c, std::ostream& out);
std::unique_ptr<Lesson> make_tensor_parallel_lesson();

}  // namespace mgpu::lessons

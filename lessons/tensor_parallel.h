// The tensor-parallel lesson's run, callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/allocator.h"
#include "core/runtime/trace_event.h"
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

// Trains with tensor parallelism over --ranks ranks (tp = ranks), with sequence parallelism on top
// when `sequence_parallel`. Throws UsageError / std::invalid_argument for impossible
// configurations, RankError(OutOfMemory) when it does not fit.
TensorParallelResult train_tensor_parallel(const CommonOptions& c, std::ostream& out,
                                           bool sequence_parallel = false);
std::unique_ptr<Lesson> make_tensor_parallel_lesson();

// One kind of collective (op "all_reduce", "all_gather", ...) rank 0 ran in group tp0 during the
// last step, from the trace: how many, their bytes, and what rank 0 itself sent (sent_bytes).
struct CollectiveTraffic {
  int count = 0;
  int64_t bytes = 0, sent = 0;
  int64_t first_bytes = -1;  // the first one's size
  bool same_size = true;     // all of them that size
};
CollectiveTraffic last_step_traffic(const trace::Trace& trace, const std::string& op);

}  // namespace mgpu::lessons

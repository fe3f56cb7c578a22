// The context-parallel lesson's run, callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/allocator.h"
#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct ContextParallelResult {
  std::vector<float> losses;              // one per step run (root process)
  std::vector<int64_t> peak_activations;  // per rank, bytes, from the allocators (after set-up)
  trace::Trace trace;
  bool under_mpi = false;
};

// Trains the GPT with context parallelism over --ranks ranks (cp = ranks) in `layout`
// (contiguous, zigzag, ulysses, chunked). Throws UsageError for impossible configurations.
ContextParallelResult train_context_parallel(const CommonOptions& c, const std::string& layout,
                                             std::ostream& out);
std::unique_ptr<Lesson> make_context_parallel_lesson();

}  // namespace mgpu::lessons

// Types the graded exercises exchange with their callers. They live outside the two namespaces
// (mgpu::reference, mgpu::mine) so that the student's results and the reference's compare
// directly and either implementation can be handed to the same caller.
#pragma once
#include <cstdint>

namespace mgpu::ex {

// Exercise 04: one rank's time within a window [t0, t1].
struct RankIdle {
  int rank = 0;
  double busy = 0;  // length of the union of the rank's compute-lane events in the window
  double idle = 0;  // (t1 - t0) - busy
  double bubble_fraction = 0;  // idle / (t1 - t0); 0 when the window is empty
};

// Exercise 05: how training state is stored and sharded.
enum class Precision {
  fp32,        // params 4 B, grads 4 B, Adam m + v 8 B                      = 16 B/param
  mixed_bf16,  // params 2 B, grads 2 B, fp32 master 4 B + Adam m + v 8 B    = 16 B/param
};

struct MemoryQuery {
  int64_t params = 0;  // parameters of the whole model
  Precision precision = Precision::fp32;
  int dp = 1;          // data-parallel degree (ranks sharing the model)
  int zero_stage = 0;  // 0: replicate all; 1: shard optimizer state; 2: +gradients; 3: +parameters
};

// Bytes held by ONE rank (the largest shard: ceil(params / dp) elements when sharded).
struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
  bool operator==(const MemoryEstimate&) const = default;
};

}  // namespace mgpu::ex

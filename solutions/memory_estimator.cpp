// Reference memory estimator.
//
// Training state per parameter, in bytes:
//              parameters  gradients  optimizer (AdamW)             total
//   fp32            4          4      m 4 + v 4               = 8    16
//   mixed bf16      2          4      fp32 master 4 + m + v   = 12   18
// The gradients stay fp32 under mixed precision (accumulated across micro-batches and reduced in
// fp32, as every lesson measures), so mixed precision saves activation memory and bandwidth, not
// state: 18 B/param instead of 16, which is why a 7B model does not fit one 80 GB GPU with plain
// DDP in either precision.
// ZeRO shards that state over the dp ranks instead of replicating it:
//   stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
// A sharded category holds ceil(params / dp) elements on the largest shard.
#include <stdexcept>

#include "core/theory/model_states.h"
#include "exercises/exercises.h"

namespace mgpu::reference {

namespace {

// Bytes per parameter of the model states (core/theory/model_states.h): AdamW in both.
theory::StateBytes bytes_per_param(ex::Precision precision) {
  return theory::model_state_bytes(precision == ex::Precision::mixed_bf16 ? 2 : 4, "adamw");
}

// Elements one rank holds: all of them, or the largest of dp shards.
int64_t elements_per_rank(int64_t params, int dp, bool sharded) {
  return sharded ? (params + dp - 1) / dp : params;
}

void validate(const ex::MemoryQuery& q) {
  if (q.params < 0) throw std::invalid_argument("estimate_memory: params must be >= 0");
  if (q.dp < 1) throw std::invalid_argument("estimate_memory: dp must be >= 1");
  if (q.zero_stage < 0 || q.zero_stage > 3)
    throw std::invalid_argument("estimate_memory: zero_stage must be 0, 1, 2 or 3");
}

}  // namespace

// Embeddings (V + T) C, 12 C^2 + 13 C per block, the final layernorm 2C and the untied head V C.
int64_t gpt_param_count(const GPTConfig& cfg) {
  return theory::gpt_parameters(cfg);
}

ex::MemoryEstimate estimate_memory(const ex::MemoryQuery& q) {
  validate(q);
  const theory::StateBytes b = bytes_per_param(q.precision);
  ex::MemoryEstimate e;
  e.optimizer_state = b.optimizer * elements_per_rank(q.params, q.dp, q.zero_stage >= 1);
  e.gradients = b.grads * elements_per_rank(q.params, q.dp, q.zero_stage >= 2);
  e.parameters = b.params * elements_per_rank(q.params, q.dp, q.zero_stage >= 3);
  return e;
}

}  // namespace mgpu::reference

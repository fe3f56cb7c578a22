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

#include "exercises/exercises.h"

namespace mgpu::reference {

namespace {

struct BytesPerParam {
  int64_t parameters, gradients, optimizer_state;
};

BytesPerParam bytes_per_param(ex::Precision precision) {
  if (precision == ex::Precision::mixed_bf16) return {2, 4, 4 + 4 + 4};
  return {4, 4, 4 + 4};
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

int64_t gpt_param_count(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, v = cfg.vocab, t = cfg.seq_len;
  const int64_t embedding = v * c + t * c;                      // wte + wpe
  const int64_t layer_norm = 2 * c;                             // weight + bias
  const int64_t attention = (c * 3 * c + 3 * c) + (c * c + c);  // qkv + proj
  const int64_t mlp = (c * 4 * c + 4 * c) + (4 * c * c + c);    // fc + proj
  const int64_t block = 2 * layer_norm + attention + mlp;       // 12 C^2 + 13 C
  const int64_t head = layer_norm + c * v;                      // ln_f + lm_head (no bias)
  return embedding + cfg.layers * block + head;
}

ex::MemoryEstimate estimate_memory(const ex::MemoryQuery& q) {
  validate(q);
  const BytesPerParam b = bytes_per_param(q.precision);
  ex::MemoryEstimate e;
  e.optimizer_state = b.optimizer_state * elements_per_rank(q.params, q.dp, q.zero_stage >= 1);
  e.gradients = b.gradients * elements_per_rank(q.params, q.dp, q.zero_stage >= 2);
  e.parameters = b.parameters * elements_per_rank(q.params, q.dp, q.zero_stage >= 3);
  return e;
}

}  // namespace mgpu::reference

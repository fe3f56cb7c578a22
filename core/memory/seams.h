// Exercise seam for the memory estimator (exercise 05: docs/exercises/05-memory-estimator.md).
// What training state costs per rank (parameters, gradients, AdamW state, sharded or not by
// ZeRO) is what the lessons predict before they measure it with the allocator. The student
// re-implements the estimate: core declares it here, solutions/ holds the reference, exercises/
// the student's version, and the program hands the lessons the one `--impl` selects, so a
// student's estimator fills the lessons' "predicted" column.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/model/gpt.h"

namespace mgpu::memory {

// How training state is stored and sharded.
enum class Precision {
  fp32,        // params 4 B, grads 4 B, Adam m + v 8 B                      = 16 B/param
  mixed_bf16,  // params 2 B, grads 4 B (fp32), fp32 master 4 B + Adam m + v 8 B = 18 B/param
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

using ParamCountFn = std::function<int64_t(const GPTConfig& cfg)>;
using EstimateMemoryFn = std::function<MemoryEstimate(const MemoryQuery& query)>;

struct MemorySeams {
  std::string impl_name;  // "reference" or "mine"
  ParamCountFn gpt_param_count;
  EstimateMemoryFn estimate_memory;
};

}  // namespace mgpu::memory

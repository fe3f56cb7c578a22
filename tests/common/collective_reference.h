// Inputs and serial answers for collective tests: rank r's buffer holds small integers, so float
// sums are exact in any order and a parallel result can be compared with ==.
#pragma once
#include <cstdint>
#include <vector>

#include "core/comm/comm.h"

namespace mgpu::testing {

inline std::vector<float> rank_input(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 3 + i % 11);
  return v;
}

// What an all-reduce of rank_input over `ranks` ranks must leave on every rank.
inline std::vector<float> serial_reduce(int ranks, int64_t n, comm::ReduceOp op) {
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    auto v = rank_input(r, n);
    for (int64_t i = 0; i < n; ++i) out[i] += v[i];
  }
  if (op == comm::ReduceOp::avg)
    for (auto& x : out) x /= static_cast<float>(ranks);
  return out;
}

}  // namespace mgpu::testing

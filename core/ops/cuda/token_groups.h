// Host side of the GPU's embedding backward (embedding.cu): the batch's rows grouped by token id,
// so that one thread per (token, column) adds a token's rows into dwte in ascending row order, the
// order of the CPU's scatter-add, without atomics. Header-only and free of CUDA so that the CPU
// tests check the grouping (tests/unit/test_kernel_math.cpp); C++17 for nvcc.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mgpu::cuda {

// One int32 buffer, copied to the device at once: rows [count] (the row indices sorted by token,
// ascending within a token), then group_token [groups] (each group's token id), then
// start [groups + 1] (group g is rows[start[g] .. start[g + 1])).
struct TokenGroupsLayout {
  std::vector<int32_t> packed;
  int64_t count = 0, groups = 0;
  const int32_t* rows() const { return packed.data(); }
  const int32_t* group_token() const { return packed.data() + count; }
  const int32_t* start() const { return packed.data() + count + groups; }
};

inline TokenGroupsLayout group_rows_by_token(const int32_t* tokens, int64_t count) {
  TokenGroupsLayout layout;
  layout.count = count;
  std::vector<int32_t>& packed = layout.packed;
  packed.resize(static_cast<size_t>(count));
  std::iota(packed.begin(), packed.end(), 0);
  // Stable: within a token the rows stay ascending.
  std::stable_sort(packed.begin(), packed.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  std::vector<int32_t> start;
  for (int64_t k = 0; k < count; k++) {
    const int32_t token = tokens[packed[static_cast<size_t>(k)]];
    if (k == 0 || token != tokens[packed[static_cast<size_t>(k - 1)]]) {
      packed.push_back(token);
      start.push_back(static_cast<int32_t>(k));
    }
  }
  layout.groups = static_cast<int64_t>(start.size());
  start.push_back(static_cast<int32_t>(count));
  packed.insert(packed.end(), start.begin(), start.end());
  return layout;
}

}  // namespace mgpu::cuda

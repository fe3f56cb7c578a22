// Row arithmetic shared by the CPU and CUDA kernels that walk whole rows one element after the
// other (ring attention's dot products, a mixture of experts' permutation). Each function fixes
// the order of its float operations, so a kernel that calls it computes the same bits on either
// side (both sides compile it without fused multiply-adds: see core/CMakeLists.txt).
#pragma once
#include <stdint.h>

#include "core/ops/math/hd.h"

namespace mgpu::math {

// sum_i a[i] * b[i], added in ascending i from 0.
MGPU_HD float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}

// The weight of row i of a permutation: scale[i], or 1 when the op was given no scales.
MGPU_HD float row_scale(const float* scale, int64_t i) {
  return scale ? scale[i] : 1.0f;
}

// ---- combine without atomics (moe_rows.cu) ----------------------------------------------------
// Several slots may land on one output row. The CPU adds them in ascending slot order; the GPU,
// one thread per output element, walks a list of each row's slots in that same order, built on
// the host before the launch. tests/unit/test_moe.cpp runs both on the CPU, bit for bit.

// The lists as a counting sort of the slots by output row, stable: row r's slots, ascending, are
// slots[begin[r] .. begin[r + 1]). begin has out_rows + 1 entries, slots n. Host only.
inline void slots_by_row(const int32_t* index, int64_t n, int64_t out_rows, int32_t* begin,
                         int32_t* slots) {
  for (int64_t r = 0; r <= out_rows; r++) begin[r] = 0;
  for (int64_t i = 0; i < n; i++) begin[index[i] + 1]++;
  for (int64_t r = 0; r < out_rows; r++) begin[r + 1] += begin[r];
  // place each slot at its row's next free entry (begin[r] moves up as it fills) ...
  for (int64_t i = 0; i < n; i++) slots[begin[index[i]]++] = static_cast<int32_t>(i);
  // ... which leaves begin[r] at row r's end, row r + 1's start: shift back by one row
  for (int64_t r = out_rows; r > 0; r--) begin[r] = begin[r - 1];
  begin[0] = 0;
}

// Column j of an output row from its slots [first, last) of `slots`: 0 + the scaled rows' column j
// in list order (rows has c columns).
MGPU_HD float combined_value(const float* rows, int64_t c, int64_t j, const int32_t* slots,
                             int32_t first, int32_t last, const float* scale) {
  float sum = 0.0f;
  for (int32_t k = first; k < last; k++) {
    const int64_t i = slots[k];
    sum += row_scale(scale, i) * rows[i * c + j];
  }
  return sum;
}

}  // namespace mgpu::math

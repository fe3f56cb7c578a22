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

}  // namespace mgpu::math

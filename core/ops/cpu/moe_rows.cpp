// The CPU kernels of a mixture of experts' row permutation (core/ops/ops.h gather_rows,
// combine_rows, gathered_row_dots): readable loops, fp32.
#include <cstring>

#include "core/ops/cpu/kernels.h"

namespace mgpu::cpu {

void gather_rows(float* rows, const float* inp, const int32_t* index, const float* scale, int64_t n,
                 int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const float* src = inp + int64_t{index[i]} * c;
    float* dst = rows + i * c;
    const float s = scale ? scale[i] : 1.0f;
    for (int64_t j = 0; j < c; ++j) dst[j] = s * src[j];
  }
}

void combine_rows(float* out, int64_t out_rows, const float* rows, const int32_t* index,
                  const float* scale, int64_t n, int64_t c) {
  std::memset(out, 0, sizeof(float) * size_t(out_rows * c));
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + int64_t{index[i]} * c;
    const float* src = rows + i * c;
    const float s = scale ? scale[i] : 1.0f;
    for (int64_t j = 0; j < c; ++j) dst[j] += s * src[j];
  }
}

void gathered_row_dots(float* dots, const float* a, const int32_t* index, const float* b, int64_t n,
                       int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a + int64_t{index[i]} * c;
    const float* y = b + i * c;
    float sum = 0.0f;
    for (int64_t j = 0; j < c; ++j) sum += x[j] * y[j];
    dots[i] = sum;
  }
}

}  // namespace mgpu::cpu

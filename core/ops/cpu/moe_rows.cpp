// The CPU kernels of a mixture of experts' row permutation (core/ops/ops.h gather_rows,
// combine_rows, gathered_row_dots): readable loops, fp32. The row arithmetic is
// core/ops/math/rows.h's, which the CUDA kernels (core/ops/cuda/moe_rows.cu) call too; combine
// adds each output row's contributions in ascending i, and so does the GPU.
#include <cstring>

#include "core/ops/cpu/kernels.h"
#include "core/ops/math/rows.h"

namespace mgpu::cpu {

void gather_rows(float* rows, const float* inp, const int32_t* index, const float* scale, int64_t n,
                 int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const float* src = inp + int64_t{index[i]} * c;
    float* dst = rows + i * c;
    const float s = math::row_scale(scale, i);
    for (int64_t j = 0; j < c; ++j) dst[j] = s * src[j];
  }
}

void combine_rows(float* out, int64_t out_rows, const float* rows, const int32_t* index,
                  const float* scale, int64_t n, int64_t c) {
  std::memset(out, 0, sizeof(float) * size_t(out_rows * c));
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + int64_t{index[i]} * c;
    const float* src = rows + i * c;
    const float s = math::row_scale(scale, i);
    for (int64_t j = 0; j < c; ++j) dst[j] += s * src[j];
  }
}

void gathered_row_dots(float* dots, const float* a, const int32_t* index, const float* b, int64_t n,
                       int64_t c) {
  for (int64_t i = 0; i < n; ++i) dots[i] = math::dot(a + int64_t{index[i]} * c, b + i * c, c);
}

}  // namespace mgpu::cpu

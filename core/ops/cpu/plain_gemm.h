// A plain single-precision GEMM for builds without OpenBLAS (the web build): the same contract as
// cblas_sgemm on row-major matrices, as one loop nest whose inner loop runs along a row of C.
// Sums are in a different order than OpenBLAS's, so weights differ in their last bits; the
// modeled clock's times, bubbles and memory do not depend on them.
#pragma once
#include <cstdint>

namespace mgpu::cpu {

// C[m,n] = alpha * op(A) @ op(B) + beta * C. A is [m,k] ([k,m] when trans_a), B is [k,n] ([n,k]
// when trans_b), each with its row stride (lda, ldb, ldc). beta 0 overwrites C (as BLAS does).
inline void plain_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    for (int64_t p = 0; p < k; ++p) {
      const float aip = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) row[j] += aip * b[j * ldb + p];
      } else {
        const float* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) row[j] += aip * brow[j];
      }
    }
  }
}

}  // namespace mgpu::cpu

// The CPU kernels of mixed precision (2-byte storage, fp32 arithmetic), with the signatures of the
// CUDA table's entries (core/ops/cuda_table.h convert, count_nonfinite, matmul_2byte), so the
// emulated CUDA table can be filled with them and a cpu run and an emulated cuda run round the
// same values the same way. The per-element rounding is core/ops/math/cast.h's, shared with the
// GPU kernels (core/ops/cuda/precision.cu).
#pragma once
#include <cstdint>

#include "core/ops/math/cast.h"

namespace mgpu::cpu {

// dst[i] = src[i] converted to dst_type: widened exactly, or rounded to nearest even (f16
// overflows to inf and flushes to 0). Every 2-byte store that lost a nonzero value to 0 or a
// finite value to inf is counted in this thread's store_counters() (core/tensor/tensor.h).
void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count);

// Number of inf/NaN elements among x[0, count).
int64_t count_nonfinite(const void* x, DType type, int64_t count);

// C[M,N] = op(A) @ op(B) + beta * C with A, B and C all of the 2-byte `type`: the operands widened
// to fp32, one fp32 GEMM (cpu::matmul), C rounded once. What a GPU's 2-byte GEMM with fp32
// accumulation computes, up to the order of the additions.
void matmul_2byte(void* c, const void* a, const void* b, DType type, int64_t m, int64_t n,
                  int64_t k, bool trans_a, bool trans_b, float beta);

}  // namespace mgpu::cpu

// Internal to the CUDA module: the pieces core/ops/cuda/*.cu export to each other and to
// core/runtime/cuda/ (install, calibrate). Every function runs on the calling rank's compute
// stream (core/runtime/cuda/streams.h) and returns without waiting, unless it returns a value.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/ops/cuda_table.h"

namespace mgpu {
// core/tensor/tensor.h's (C++20, so declared again here for the .cu files): a GPU kernel stored
// `stores` 2-byte values without counting what rounding lost (StoreCounters::unchecked).
void count_unchecked_stores(int64_t stores);
}  // namespace mgpu

namespace mgpu::cuda {

// The full table of CUDA kernels, ready for install_cuda_kernels().
CudaKernels kernel_table();

// Each .cu file fills its entries of `table`: kernels.cu the element-wise and row ops,
// gemm_attention.cu matmul and attention, ring_attention.cu the four ring-attention ops,
// moe_rows.cu the MoE permutation, precision.cu convert / count_nonfinite / matmul_2byte,
// llama_kernels.cu RMSNorm, SwiGLU and RoPE.
void fill_elementwise_kernels(CudaKernels& table);
void fill_gemm_attention_kernels(CudaKernels& table);
void fill_ring_attention_kernels(CudaKernels& table);
void fill_moe_kernels(CudaKernels& table);
void fill_precision_kernels(CudaKernels& table);
void fill_llama_kernels(CudaKernels& table);

// Row-major C = alpha * op(A) @ op(B) + beta * C for `batch` matrices at fixed strides (elements).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
          float* c, int64_t ldc, int64_t stride_c, int64_t batch);

// The table's matmul_2byte (cuda_table.h): row-major C = op(A) op(B) + beta C with A, B and C of
// the 2-byte `type`, cublasGemmEx with fp32 compute (gemm_attention.cu; precision.cu installs it).
void matmul_2byte(void* c, const void* a, const void* b, DType type, int64_t m, int64_t n,
                  int64_t k, bool trans_a, bool trans_b, float beta);

// Causal softmax over the rows of att [rows, t] in place (row r is query position r % t), with
// the scores pre-scaled; and its backward: ds = p * (ds - rowsum(p * ds)) * scale, in place.
void causal_softmax_forward(float* att, int64_t rows, int64_t t);
void causal_softmax_backward(float* ds, const float* p, int64_t rows, int64_t t, float scale);

// A host array (positions, row indices, scales) copied into the scratch buffer `slot`
// (streams.h) on the compute stream; returns the device copy. host_arrays.cu.
void* host_to_scratch(const void* host, size_t bytes, int slot);
// Device results copied into host memory; waits for the compute stream (the host needs them).
void scratch_to_host(void* host, const void* dev, size_t bytes);

// An empty kernel on the compute stream (calibration measures launch overhead with it).
void launch_empty_kernel();

}  // namespace mgpu::cuda

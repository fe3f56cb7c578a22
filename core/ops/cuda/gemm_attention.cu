// GEMM and causal attention on the GPU: cuBLAS does the products, layernorm_softmax.cu the causal
// softmax.
//
// cuBLAS is column-major; our tensors are row-major. A row-major matrix read as column-major is
// its transpose, so row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T:
// swap the operands (and m with n) and keep every leading dimension as it is. That is all
// gemm() below does.
#include <cmath>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/math/cast.h"  // DType's values
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
          float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublasSgemmStridedBatched(
            cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
            static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
            static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a, &beta, c,
            static_cast<int>(ldc), stride_c, static_cast<int>(batch)),
        "cublasSgemmStridedBatched");
}

namespace {
cudaDataType_t cuda_type(DType type) {  // of a 2-byte DType
  return type == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}
}  // namespace

void matmul_2byte(void* c, const void* a, const void* b, DType type, int64_t m, int64_t n,
                  int64_t k, bool trans_a, bool trans_b, float beta) {
  if (m == 0 || n == 0) return;
  const int lda = static_cast<int>(trans_a ? m : k), ldb = static_cast<int>(trans_b ? k : n);
  const float alpha = 1.0f;  // fp32, as the compute type
  cublasHandle_t handle = cublas();
  // Reductions inside cuBLAS (split-K) in fp32 too, never in the 2-byte output type; the
  // handle's own mode (no TF32 unless MGPU_TF32=1) is kept and restored.
  cublasMath_t mode;
  check(cublasGetMathMode(handle, &mode), "cublasGetMathMode");
  check(cublasSetMathMode(handle, static_cast<cublasMath_t>(
                                      mode | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
        "cublasSetMathMode");
  const cublasStatus_t status =
      cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                   cuda_type(type), ldb, a, cuda_type(type), lda, &beta, c, cuda_type(type),
                   static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  check(cublasSetMathMode(handle, mode), "cublasSetMathMode");
  check(status, "cublasGemmEx");
  count_unchecked_stores(m * n);
}

namespace {

// C[m,n] = op(A) @ op(B) + beta * C, as cpu::matmul.
void matmul(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a,
            bool trans_b, float beta) {
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, 0, b, ldb, 0, beta, c, n, 0, 1);
}

// Per batch element, all heads at once: head h of q, k and v sits at column offset h*hs of
// their part of qkv's rows, so "the next head" is a fixed stride and one strided-batched GEMM
// covers every head. Layouts match the CPU: qkv [B,T,C + 2 kv_heads hs], att [B,H,T,T].
//   att = causal_softmax(q k^T / sqrt(hs)),  out = att v
// Grouped-query attention: query head h = kv * group + g reads kv head kv. For each member g of
// a group, the query heads g, g + group, ... (q stride group*hs) against the kv heads 0, 1, ...
// (stride hs) are one strided-batched GEMM of kv_heads matrices: `group` GEMMs in all, exactly
// the multi-head call when group is 1.
void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                       int64_t heads, int64_t kv_heads) {
  const int64_t hs = c / heads, group = heads / kv_heads;
  const int64_t kv_c = kv_heads * hs, row = c + 2 * kv_c;  // qkv's row: q | k | v
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t g = 0; g < group; g++) {
      const float* q = qkv + bi * t * row + g * hs;
      const float* k = qkv + bi * t * row + c;
      float* p = att + (bi * heads + g) * t * t;
      gemm(false, true, t, t, hs, scale, q, row, group * hs, k, row, hs, 0.0f, p, t, group * t * t,
           kv_heads);
    }
  causal_softmax_forward(att, b * heads * t, t);  // every row of every (batch, head) at once
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t g = 0; g < group; g++) {
      const float* v = qkv + bi * t * row + c + kv_c;
      const float* p = att + (bi * heads + g) * t * t;
      gemm(false, false, t, hs, t, 1.0f, p, t, group * t * t, v, row, hs, 0.0f,
           out + bi * t * c + g * hs, c, group * hs, kv_heads);
    }
}

// As the CPU, per batch element (all heads batched), with P = att and dO = dout's head slice:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)) / sqrt(hs),  dQ = dS K,  dK = dS^T Q
// dS for one batch element ([H,T,T]) lives in a scratch buffer reused across batch elements
// (safe: everything is on one stream, so the next element's dP waits for this one's dQ and dK).
// Grouped-query: the group's members g add their dK and dV into the kv heads' (beta 1 after the
// first), in ascending g, as the CPU adds ascending query heads.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        int64_t b, int64_t t, int64_t c, int64_t heads, int64_t kv_heads) {
  const int64_t hs = c / heads, group = heads / kv_heads;
  const int64_t kv_c = kv_heads * hs, row = c + 2 * kv_c;
  const int64_t tt = t * t, gtt = group * t * t, ghs = group * hs;  // the strides of a g's batch
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  auto* ds = static_cast<float*>(
      scratch(kScratchAttention, static_cast<size_t>(heads * t * t) * sizeof(float)));
  for (int64_t bi = 0; bi < b; bi++) {
    const float* q = qkv + bi * t * row;
    const float* k = q + c;
    const float* v = k + kv_c;
    float* dq = dqkv + bi * t * row;
    float* dk = dq + c;
    float* dv = dk + kv_c;
    const float* p = att + bi * heads * tt;
    const float* d_o = dout + bi * t * c;
    for (int64_t g = 0; g < group; g++) {
      const float beta = g == 0 ? 0.0f : 1.0f;
      gemm(true, false, t, hs, t, 1.0f, p + g * tt, t, gtt, d_o + g * hs, c, ghs, beta, dv, row, hs,
           kv_heads);  // dV
      gemm(false, true, t, t, hs, 1.0f, d_o + g * hs, c, ghs, v, row, hs, 0.0f, ds + g * tt, t, gtt,
           kv_heads);  // dP
    }
    causal_softmax_backward(ds, p, heads * t, t, scale);  // dS
    for (int64_t g = 0; g < group; g++) {
      const float beta = g == 0 ? 0.0f : 1.0f;
      gemm(false, false, t, hs, t, 1.0f, ds + g * tt, t, gtt, k, row, hs, 0.0f, dq + g * hs, row,
           ghs, kv_heads);  // dQ
      gemm(true, false, t, hs, t, 1.0f, ds + g * tt, t, gtt, q + g * hs, row, ghs, beta, dk, row,
           hs, kv_heads);  // dK
    }
  }
}

}  // namespace

void fill_gemm_attention_kernels(CudaKernels& k) {
  k.matmul = matmul;
  k.attention_forward = attention_forward;
  k.attention_backward = attention_backward;
}

CudaKernels kernel_table() {
  CudaKernels k;
  fill_elementwise_kernels(k);
  fill_gemm_attention_kernels(k);
  fill_ring_attention_kernels(k);
  fill_moe_kernels(k);
  fill_precision_kernels(k);
  fill_llama_kernels(k);
  return k;
}

}  // namespace mgpu::cuda

// The seam for CUDA kernels. ops.cpp calls a DeviceKind::cuda op through this table of function
// pointers; a CUDA module (core/ops/cuda/, built only with CUDA) fills it in at start-up with
// install_cuda_kernels(). A null entry means "this op has no CUDA kernel yet", and ops.cpp says so
// instead of crashing. The signatures mirror core/ops/cpu/kernels.h exactly; pointers to float
// data are device pointers, token/target ids are HOST pointers (the CUDA kernel copies them).
#pragma once
#include <cstdint>

namespace mgpu {
// core/runtime/dtype.h (C++20) is not included: nvcc compiles the .cu files as C++17.
enum class DType : uint8_t;
}  // namespace mgpu

namespace mgpu {

struct CudaKernels {
  void (*matmul)(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k,
                 bool trans_a, bool trans_b, float beta) = nullptr;
  void (*bias_add)(float* out, const float* bias, int64_t n, int64_t c) = nullptr;
  void (*bias_grad)(float* dbias, const float* dout, int64_t n, int64_t c) = nullptr;
  void (*add)(float* out, const float* a, const float* b, int64_t count) = nullptr;
  void (*axpy)(float* y, float alpha, const float* x, int64_t count) = nullptr;
  void (*scale)(float* x, float alpha, int64_t count) = nullptr;
  void (*gelu_forward)(float* out, const float* inp, int64_t count) = nullptr;
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int64_t count) = nullptr;
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t n, int64_t c) = nullptr;
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int64_t n, int64_t c) = nullptr;
  void (*softmax_forward)(float* out, const float* inp, int64_t n, int64_t c) = nullptr;
  void (*softmax_backward)(float* dinp, const float* out, const float* dout, int64_t n,
                           int64_t c) = nullptr;
  // Grouped-query attention (multi-head when kv_heads == heads); gemm_attention.cu.
  void (*attention_forward)(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                            int64_t c, int64_t heads, int64_t kv_heads) = nullptr;
  void (*attention_backward)(float* dqkv, const float* dout, const float* qkv, const float* att,
                             int64_t b, int64_t t, int64_t c, int64_t heads,
                             int64_t kv_heads) = nullptr;
  // A Llama-style block's ops (ops.h rmsnorm_*, swiglu_*, rope_*; llama_kernels.cu). positions
  // is a HOST pointer, like token ids.
  void (*rmsnorm_forward)(float* out, float* rstd, const float* inp, const float* weight, int64_t n,
                          int64_t c) = nullptr;
  void (*rmsnorm_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t n, int64_t c) = nullptr;
  void (*swiglu_forward)(float* out, const float* gate_up, int64_t n, int64_t f) = nullptr;
  void (*swiglu_backward)(float* dgate_up, const float* gate_up, const float* dout, int64_t n,
                          int64_t f) = nullptr;
  void (*rope_forward)(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                       int64_t head_size, int64_t row_width, float theta) = nullptr;
  void (*rope_backward)(float* dx, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                        int64_t head_size, int64_t row_width, float theta) = nullptr;
  // Ring attention (ops.h attention_block_*, attention_merge, copy_columns; ring_attention.cu).
  // q_pos and kv_pos are HOST pointers, like token ids.
  void (*attention_block_forward)(float* out, float* lse, float* att, const float* q,
                                  const float* kv, const int32_t* q_pos, const int32_t* kv_pos,
                                  int64_t b, int64_t tq, int64_t tk, int64_t c, int64_t heads,
                                  int64_t kv_heads, int64_t att_cols) = nullptr;
  void (*attention_block_backward)(float* dq, float* dkv, const float* dout, const float* out,
                                   const float* q, const float* kv, const float* att,
                                   const float* lse, const int32_t* q_pos, const int32_t* kv_pos,
                                   int64_t b, int64_t tq, int64_t tk, int64_t c, int64_t heads,
                                   int64_t kv_heads, int64_t att_cols) = nullptr;
  void (*attention_merge)(float* out, float* lse, const float* block_out, const float* block_lse,
                          int64_t b, int64_t t, int64_t c, int64_t heads) = nullptr;
  void (*copy_columns)(float* dst, int64_t dst_cols, int64_t dst_begin, const float* src,
                       int64_t src_cols, int64_t src_begin, int64_t width, int64_t rows,
                       bool add) = nullptr;
  // A mixture of experts' permutation (ops.h gather_rows, combine_rows; moe_rows.cu). index,
  // scale and dots are HOST pointers, like token ids.
  void (*gather_rows)(float* rows, const float* inp, const int32_t* index, const float* scale,
                      int64_t n, int64_t c) = nullptr;
  void (*combine_rows)(float* out, int64_t out_rows, const float* rows, const int32_t* index,
                       const float* scale, int64_t n, int64_t c) = nullptr;
  void (*gathered_row_dots)(float* dots, const float* a, const int32_t* index, const float* b,
                            int64_t n, int64_t c) = nullptr;
  void (*embedding_forward)(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                            int64_t b, int64_t t, int64_t c) = nullptr;
  void (*embedding_backward)(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                             int64_t b, int64_t t, int64_t c) = nullptr;
  float (*cross_entropy_forward_backward)(float* dlogits, const float* logits,
                                          const int32_t* targets, int64_t n, int64_t v,
                                          float grad_scale) = nullptr;
  float (*cross_entropy_loss)(const float* logits, const int32_t* targets, int64_t n,
                              int64_t v) = nullptr;
  void (*vocab_parallel_ce_stats)(float* stats, const float* logits, const int32_t* targets,
                                  int64_t n, int64_t v, int64_t v0) = nullptr;
  float (*vocab_parallel_ce_forward_backward)(float* dlogits, const float* logits,
                                              const float* all_stats, const int32_t* targets,
                                              int64_t n, int64_t v, int64_t v0, int64_t parts,
                                              float grad_scale) = nullptr;

  // Optimizer updates (core/ops/optimizer_kernels.h): one element-wise pass over n values.
  // bias1 = 1 - beta1^step, bias2 = 1 - beta2^step (computed once on the host, in double).
  void (*sgd_momentum)(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                       float momentum, float weight_decay) = nullptr;
  void (*adamw)(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, double bias1,
                double bias2) = nullptr;

  // Mixed precision on the GPU (precision.cu): 2-byte storage, fp32 arithmetic.
  // dst[i] = src[i] converted to dst_type (rounded to nearest even; fp16 overflows to inf); both
  // device pointers. ops.cpp stages a 2-byte tensor into an fp32 device buffer and back with it.
  void (*convert)(void* dst, DType dst_type, const void* src, DType src_type,
                  int64_t count) = nullptr;
  // Number of inf/NaN elements of x (the loss scaler's overflow check), counted on the device.
  int64_t (*count_nonfinite)(const void* x, DType type, int64_t count) = nullptr;
  // matmul with a, b and c all of the 2-byte `type`: cuBLAS in that type with fp32 compute.
  void (*matmul_2byte)(void* c, const void* a, const void* b, DType type, int64_t m, int64_t n,
                       int64_t k, bool trans_a, bool trans_b, float beta) = nullptr;

  // x[i] = value (Tensor::fill on a cuda tensor, e.g. zero_grad, without a host round trip).
  void (*fill)(float* x, float value, int64_t count) = nullptr;
};

// The installed table (all null until a CUDA module installs one).
const CudaKernels& cuda_kernels();
void install_cuda_kernels(const CudaKernels& kernels);

}  // namespace mgpu

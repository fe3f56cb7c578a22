// Internal to kernels.cu and the files split from it (layernorm_softmax.cu, embedding.cu,
// cross_entropy.cu, optimizer_kernels.cu): the launch shape, the block reductions and the host
// wrappers kernels.cu's table entry installs. The plain functions are defined once, in kernels.cu.
#pragma once
#include <cstdint>

#include "core/ops/math/elementwise.h"

namespace mgpu::cuda::detail {

constexpr int kThreads = 256;  // threads per block in kernels.cu and its parts

// Enough blocks for `count` threads, capped: the grid-stride loops cover the rest.
unsigned blocks_for(int64_t count);

void check_launch(const char* op);

// ---- reductions ---------------------------------------------------------------------------

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {  // the CPU's std::max_element keeps the larger value the same way
  __device__ float operator()(float a, float b) const { return math::larger(a, b); }
};

template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces one value per thread over the whole block; EVERY thread gets the result. blockDim.x
// must be a multiple of 32 (it is kThreads). Safe to call several times in a row.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  return warp_reduce(v, op);  // each warp reduces the partials itself: no third sync needed
}

#define GRID_STRIDE(i, count)                                                   \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

unsigned column_blocks(int64_t c);

// Token ids arrive in host memory (ops.h's contract): copy them to a device scratch buffer first.
// From pageable memory cudaMemcpyAsync returns only once the host data has been read, so the
// caller may reuse its buffer right away.
const int32_t* tokens_to_device(const int32_t* host, int64_t count, int slot);

// The host wrappers of the other parts (the CudaKernels signatures), for fill_elementwise_kernels.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t n, int64_t c);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t n, int64_t c);
void softmax_forward(float* out, const float* inp, int64_t n, int64_t c);
void softmax_backward(float* dinp, const float* out, const float* dout, int64_t n, int64_t c);
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c);
float cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets,
                                     int64_t n, int64_t v, float grad_scale);
float cross_entropy_loss(const float* logits, const int32_t* targets, int64_t n, int64_t v);
void vocab_parallel_ce_stats(float* stats, const float* logits, const int32_t* targets, int64_t n,
                             int64_t v, int64_t v0);
float vocab_parallel_ce_forward_backward(float* dlogits, const float* logits,
                                         const float* all_stats, const int32_t* targets, int64_t n,
                                         int64_t v, int64_t v0, int64_t parts, float grad_scale);
void sgd_momentum(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                  float momentum, float weight_decay);
void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, double bias1, double bias2);
void fill(float* x, float value, int64_t count);

}  // namespace mgpu::cuda::detail

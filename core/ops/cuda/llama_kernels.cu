// The CUDA kernels of a Llama-style block's ops: RMSNorm, SwiGLU and rotary positions (RoPE).
// The arithmetic is core/ops/math/llama.h's, which the CPU kernels (core/ops/cpu/llama_kernels.cpp)
// call too, compiled without fused multiply-adds (core/CMakeLists.txt). The shapes of parallelism
// are kernels.cu's:
//  - RMSNorm: one block per row (its mean square added in block_reduce's tree order, not the CPU's
//    left-to-right one: within fp32 tolerance of the CPU), and one thread per column for dweight,
//    adding the rows in ascending order as the CPU does (the same bits);
//  - SwiGLU and RoPE: one thread per output element (per rotated pair for RoPE), the CPU's bits.
#include <cmath>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/kernels_internal.h"
#include "core/ops/math/llama.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

using detail::block_reduce;
using detail::blocks_for;
using detail::check_launch;
using detail::column_blocks;
using detail::kThreads;
using detail::Sum;

namespace {

// ---- RMSNorm ----------------------------------------------------------------------------------

// One block per row: the mean square, then the row.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    squares = math::accumulate(squares, math::square(x[j]));
  const float r = math::rmsnorm_rstd(math::row_mean(block_reduce(squares, Sum{}, 0.0f), c));
  float* y = out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = math::rmsnorm_out(x[j], r, weight[j]);
  if (threadIdx.x == 0) rstd[row] = r;
}

// dweight[j] += dy[i,j] * xhat[i,j] for i = 0, 1, ..., n-1: thread j walks its column.
__global__ void rmsnorm_weight_grad_kernel(float* dweight, const float* dout, const float* inp,
                                           const float* rstd, int64_t n, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float dw = dweight[j];
  for (int64_t i = 0; i < n; i++)
    dw = math::accumulate(dw, dout[i * c + j] * math::rmsnorm_xhat(inp[i * c + j], rstd[i]));
  dweight[j] = dw;
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = w * dy, one block per row.
__global__ void rmsnorm_backward_kernel(float* dinp, const float* dout, const float* inp,
                                        const float* weight, const float* rstd, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  const float* dy = dout + row * c;
  const float r = rstd[row];
  float gx_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    gx_sum =
        math::accumulate(gx_sum, math::layernorm_g(weight[j], dy[j]) * math::rmsnorm_xhat(x[j], r));
  const float gx_mean = math::row_mean(block_reduce(gx_sum, Sum{}, 0.0f), c);
  // Every thread has read its dy (block_reduce synchronizes), and each writes only the columns
  // it read: dinp may alias dout.
  float* dx = dinp + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dx[j] = math::rmsnorm_dx(math::layernorm_g(weight[j], dy[j]), math::rmsnorm_xhat(x[j], r),
                             gx_mean, r);
}

// ---- SwiGLU: element (i, j) of out [n, f] from gate_up[i, j] and gate_up[i, f + j]
// ---------------

__global__ void swiglu_forward_kernel(float* out, const float* gate_up, int64_t f, int64_t count) {
  GRID_STRIDE(e, count) {
    const int64_t i = e / f, j = e % f;
    out[e] = math::swiglu(gate_up[i * 2 * f + j], gate_up[i * 2 * f + f + j]);
  }
}

__global__ void swiglu_backward_kernel(float* dgate_up, const float* gate_up, const float* dout,
                                       int64_t f, int64_t count) {
  GRID_STRIDE(e, count) {
    const int64_t i = e / f, j = e % f;
    const math::SwigluGrad g =
        math::swiglu_backward(gate_up[i * 2 * f + j], gate_up[i * 2 * f + f + j], dout[e]);
    dgate_up[i * 2 * f + j] = g.dgate;
    dgate_up[i * 2 * f + f + j] = g.dup;
  }
}

// ---- RoPE: one thread per pair (2i, 2i+1) of a head of a token of x [b*t, heads*hs] ----------
// Each thread computes its own angle (the CPU tabulates them per token: the same function).

__global__ void rope_kernel(float* x, const int32_t* positions, int64_t t, int64_t heads,
                            int64_t hs, int64_t row_width, float theta, float sine_sign,
                            int64_t count) {
  const int64_t pairs = hs / 2;
  GRID_STRIDE(e, count) {
    const int64_t i = e % pairs, h = (e / pairs) % heads, token = e / (pairs * heads);
    const math::RopeAngle a = math::rope_angle(positions[token % t], i, hs, theta);
    float* p = x + token * row_width + h * hs + 2 * i;
    math::rope_rotate(p, p + 1, a.cos, sine_sign * a.sin);  // times +-1: exact
  }
}

// ---- host wrappers (the CudaKernels signatures) ----------------------------------------------

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t n,
                     int64_t c) {
  if (n == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(
      out, rstd, inp, weight, c);
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t n, int64_t c) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  // dweight first: it only reads dout, which stays valid even if dinp aliases it.
  rmsnorm_weight_grad_kernel<<<column_blocks(c), kThreads, 0, s>>>(dweight, dout, inp, rstd, n, c);
  rmsnorm_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(dinp, dout, inp, weight,
                                                                        rstd, c);
  check_launch("rmsnorm_backward");
}

void swiglu_forward(float* out, const float* gate_up, int64_t n, int64_t f) {
  if (n * f == 0) return;
  swiglu_forward_kernel<<<blocks_for(n * f), kThreads, 0, compute_stream()>>>(out, gate_up, f,
                                                                              n * f);
  check_launch("swiglu_forward");
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t n,
                     int64_t f) {
  if (n * f == 0) return;
  swiglu_backward_kernel<<<blocks_for(n * f), kThreads, 0, compute_stream()>>>(dgate_up, gate_up,
                                                                               dout, f, n * f);
  check_launch("swiglu_backward");
}

// positions arrive in host memory (ops.h's contract): copied to a scratch buffer first.
void rope(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads, int64_t hs,
          int64_t row_width, float theta, float sine_sign, const char* op) {
  const int64_t count = b * t * heads * (hs / 2);
  if (count == 0) return;
  const auto* pos = static_cast<const int32_t*>(
      host_to_scratch(positions, static_cast<size_t>(t) * sizeof(int32_t), kScratchTokens));
  rope_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(x, pos, t, heads, hs, row_width,
                                                                    theta, sine_sign, count);
  check_launch(op);
}

void rope_forward(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                  int64_t head_size, int64_t row_width, float theta) {
  rope(x, positions, b, t, heads, head_size, row_width, theta, 1.0f, "rope_forward");
}

void rope_backward(float* dx, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                   int64_t head_size, int64_t row_width, float theta) {
  rope(dx, positions, b, t, heads, head_size, row_width, theta, -1.0f, "rope_backward");
}

}  // namespace

void fill_llama_kernels(CudaKernels& k) {
  k.rmsnorm_forward = rmsnorm_forward;
  k.rmsnorm_backward = rmsnorm_backward;
  k.swiglu_forward = swiglu_forward;
  k.swiglu_backward = swiglu_backward;
  k.rope_forward = rope_forward;
  k.rope_backward = rope_backward;
}

}  // namespace mgpu::cuda

// The row-wise CUDA kernels: layernorm (with its parameter gradients' column sums) and softmax,
// plain and causal (attention's scores). One block per row; see kernels.cu for the scheme.
#include <cmath>

#include "core/ops/math/elementwise.h"

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/kernels_internal.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

using detail::block_reduce;
using detail::check_launch;
using detail::column_blocks;
using detail::kThreads;
using detail::Max;
using detail::Sum;

namespace {

// dweight[j] += dy[i,j] * xhat[i,j];  dbias[j] += dy[i,j], row after row as above.
__global__ void layernorm_param_grad_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int64_t n, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float dw = dweight[j], db = dbias[j];
  for (int64_t i = 0; i < n; i++) {
    const float dy = dout[i * c + j];
    dw = math::accumulate(dw, dy * math::layernorm_xhat(inp[i * c + j], mean[i], rstd[i]));
    db = math::accumulate(db, dy);
  }
  dweight[j] = dw;
  dbias[j] = db;
}

// ---- row-wise: layernorm, softmax ------------------------------------------------------------

// One block per row: mean, then variance (two passes, as the CPU kernel), then normalize.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s = math::accumulate(s, x[j]);
  const float m = math::row_mean(block_reduce(s, Sum{}, 0.0f), c);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    v = math::accumulate(v, math::squared_deviation(x[j], m));
  const float r = math::layernorm_rstd(math::row_mean(block_reduce(v, Sum{}, 0.0f), c));
  float* y = out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = math::layernorm_out(x[j], m, r, weight[j], bias[j]);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w * dy, one block per row.
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp,
                                          const float* weight, const float* mean, const float* rstd,
                                          int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  const float* dy = dout + row * c;
  const float m = mean[row], r = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float g = math::layernorm_g(weight[j], dy[j]);
    g_sum = math::accumulate(g_sum, g);
    gx_sum = math::accumulate(gx_sum, g * math::layernorm_xhat(x[j], m, r));
  }
  const float g_mean = math::row_mean(block_reduce(g_sum, Sum{}, 0.0f), c);
  const float gx_mean = math::row_mean(block_reduce(gx_sum, Sum{}, 0.0f), c);
  float* dx = dinp + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = math::layernorm_xhat(x[j], m, r);
    dx[j] = math::layernorm_dx(math::layernorm_g(weight[j], dy[j]), xhat, g_mean, gx_mean, r);
  }
}

// Softmax of one row per block; `valid` entries take part, the rest (causal mask) become 0.
__device__ void softmax_row(float* y, const float* x, int64_t valid, int64_t c) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = math::larger(mx, x[j]);
  mx = block_reduce(mx, Max{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    s = math::accumulate(s, math::softmax_numerator(x[j], mx));
  const float inv = math::reciprocal(block_reduce(s, Sum{}, 0.0f));
  // Every thread has read what it needs (block_reduce synchronizes), so y may alias x.
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = j < valid ? math::softmax_numerator(x[j], mx) * inv : 0.0f;
}

// dx = y * (dy - sum(y * dy)) * scale over the first `valid` entries; 0 beyond. (softmax_backward
// passes scale 1: multiplying by 1 is exact, so that is the CPU's unscaled formula.)
__device__ void softmax_backward_row(float* dx, const float* y, const float* dy, int64_t valid,
                                     int64_t c, float scale) {
  float d = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) d = math::accumulate(d, y[j] * dy[j]);
  const float dot = block_reduce(d, Sum{}, 0.0f);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dx[j] = j < valid ? math::softmax_backward_scaled(y[j], dy[j], dot, scale) : 0.0f;
}

__global__ void softmax_forward_kernel(float* out, const float* inp, int64_t c) {
  softmax_row(out + blockIdx.x * c, inp + blockIdx.x * c, c, c);
}

__global__ void softmax_backward_kernel(float* dinp, const float* out, const float* dout,
                                        int64_t c) {
  const int64_t o = blockIdx.x * c;
  softmax_backward_row(dinp + o, out + o, dout + o, c, c, 1.0f);
}

// Attention rows: row r of [B*H*T, T] is query position r % t, which sees keys 0..r%t.
__global__ void causal_softmax_forward_kernel(float* att, int64_t t) {
  const int64_t row = blockIdx.x;
  softmax_row(att + row * t, att + row * t, row % t + 1, t);
}

__global__ void causal_softmax_backward_kernel(float* ds, const float* p, int64_t t, float scale) {
  const int64_t row = blockIdx.x;
  softmax_backward_row(ds + row * t, p + row * t, ds + row * t, row % t + 1, t, scale);
}

}  // namespace

namespace detail {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t n, int64_t c) {
  if (n == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(
      out, mean, rstd, inp, weight, bias, c);
  check_launch("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t n, int64_t c) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  // Parameter gradients first: they only read dout, which stays valid even if dinp aliases it.
  layernorm_param_grad_kernel<<<column_blocks(c), kThreads, 0, s>>>(dweight, dbias, dout, inp, mean,
                                                                    rstd, n, c);
  layernorm_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(dinp, dout, inp, weight,
                                                                          mean, rstd, c);
  check_launch("layernorm_backward");
}

void softmax_forward(float* out, const float* inp, int64_t n, int64_t c) {
  if (n == 0) return;
  softmax_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(out, inp, c);
  check_launch("softmax_forward");
}

void softmax_backward(float* dinp, const float* out, const float* dout, int64_t n, int64_t c) {
  if (n == 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(dinp, out,
                                                                                       dout, c);
  check_launch("softmax_backward");
}

}  // namespace detail

void causal_softmax_forward(float* att, int64_t rows, int64_t t) {
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, compute_stream()>>>(att,
                                                                                                t);
  check_launch("causal_softmax_forward");
}

void causal_softmax_backward(float* ds, const float* p, int64_t rows, int64_t t, float scale) {
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, compute_stream()>>>(
      ds, p, t, scale);
  check_launch("causal_softmax_backward");
}

}  // namespace mgpu::cuda

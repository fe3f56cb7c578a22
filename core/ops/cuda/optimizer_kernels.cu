// The CUDA optimizer steps (SGD with momentum, AdamW), one thread per parameter with the CPU's
// per-element math, and fill.
#include "core/ops/math/optimizer.h"

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/kernels_internal.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

using detail::blocks_for;
using detail::check_launch;
using detail::kThreads;

namespace {

__global__ void sgd_momentum_kernel(float* p, const float* g, float* buf, int64_t n, float lr,
                                    float momentum, float weight_decay) {
  GRID_STRIDE(i, n) {
    math::sgd_momentum_element(&p[i], g[i], buf ? &buf[i] : nullptr, lr, momentum, weight_decay);
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float decay, double bias1,
                             double bias2) {
  GRID_STRIDE(i, n) {
    math::adamw_element(&p[i], g[i], &m[i], &v[i], lr, beta1, beta2, eps, decay, bias1, bias2);
  }
}

__global__ void fill_kernel(float* x, float value, int64_t count) {
  GRID_STRIDE(i, count) x[i] = value;
}

}  // namespace

namespace detail {

void sgd_momentum(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                  float momentum, float weight_decay) {
  if (n == 0) return;
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(
      param, grad, momentum != 0.0f ? momentum_buf : nullptr, n, lr, momentum, weight_decay);
  check_launch("sgd_momentum");
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, double bias1, double bias2) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(
      param, grad, m, v, n, lr, beta1, beta2, eps, math::adamw_decay(lr, weight_decay), bias1,
      bias2);
  check_launch("adamw");
}

void fill(float* x, float value, int64_t count) {
  if (count == 0) return;
  fill_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(x, value, count);
  check_launch("fill");
}

}  // namespace detail

}  // namespace mgpu::cuda

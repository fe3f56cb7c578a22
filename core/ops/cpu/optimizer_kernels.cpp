// CPU (and phantom) optimizer kernels: one readable loop each.
#include "core/ops/optimizer_kernels.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/ops/cpu/optimizer_loops.h"
#include "core/ops/cpu/vectorize.h"
#include "core/ops/cuda_table.h"
#include "core/ops/math/optimizer.h"
#include "core/runtime/context.h"

namespace mgpu::ops {

namespace {

void check_same_size(const char* op, const Tensor& param, const Tensor& other, const char* what) {
  if (other.numel() != param.numel())
    throw std::invalid_argument(fmt::format("{}: {} has {} elements but the parameter has {}", op,
                                            what, other.numel(), param.numel()));
}

// These loops run on host memory; a CUDA tensor needs the CUDA kernels.
void check_host(const char* op, const Tensor& param) {
  if (param.has_data() && param.device().kind != DeviceKind::cpu)
    throw std::logic_error(
        fmt::format("{}: CPU kernel called on a {} tensor", op,
                    param.device().kind == DeviceKind::cuda ? "cuda" : "non-cpu"));
}

// The installed CUDA kernel for a cuda tensor (ops.cpp's seam), or a clear error.
template <class Fn>
Fn cuda_entry(Fn CudaKernels::*entry, const char* op) {
  Fn fn = cuda_kernels().*entry;
  if (!fn)
    throw std::logic_error(
        fmt::format("{}: this op has no CUDA kernel yet (call mgpu::cuda::install() first)", op));
  return fn;
}

bool on_cuda(const Tensor& t) {
  return t.device().kind == DeviceKind::cuda;
}

// The update loops, separate so they can be compiled per vector width (vectorize.h); the update
// of each element is core/ops/math/optimizer.h's, shared with the CUDA kernels.
MGPU_VECTOR_CLONES void sgd_loop(float* __restrict p, const float* __restrict g,
                                 float* __restrict buf, int64_t n, float lr, float momentum,
                                 float weight_decay) {
  for (int64_t i = 0; i < n; ++i)
    math::sgd_momentum_element(&p[i], g[i], buf ? &buf[i] : nullptr, lr, momentum, weight_decay);
}

MGPU_VECTOR_CLONES void adamw_loop(float* __restrict p, const float* __restrict g,
                                   float* __restrict mp, float* __restrict vp, int64_t n, float lr,
                                   float beta1, float beta2, float eps, float decay, double bias1,
                                   double bias2) {
  for (int64_t i = 0; i < n; ++i)
    math::adamw_element(&p[i], g[i], &mp[i], &vp[i], lr, beta1, beta2, eps, decay, bias1, bias2);
}

}  // namespace

void sgd_momentum_update(Tensor param, Tensor grad, Tensor momentum_buf, float lr, float momentum,
                         float weight_decay) {
  const int64_t n = param.numel();
  const bool use_momentum = momentum != 0.0f;
  // Per element: weight decay (2), momentum (2), update (2); read p, g (+buf), write p (+buf).
  KernelScope k("sgd_momentum", 6.0 * n, (use_momentum ? 5.0 : 3.0) * 4.0 * n);
  check_same_size("sgd_momentum_update", param, grad, "grad");
  if (use_momentum) check_same_size("sgd_momentum_update", param, momentum_buf, "momentum buffer");
  if (!param.has_data()) return;  // phantom: cost only
  if (on_cuda(param)) {
    cuda_entry(&CudaKernels::sgd_momentum, "sgd_momentum_update")(
        param.f32(), grad.f32(), use_momentum ? momentum_buf.f32() : nullptr, n, lr, momentum,
        weight_decay);
    return;
  }
  check_host("sgd_momentum_update", param);

  cpu::sgd_momentum(param.f32(), grad.f32(), use_momentum ? momentum_buf.f32() : nullptr, n, lr,
                    momentum, weight_decay);
}

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) {
  const int64_t n = param.numel();
  // Per element ~12 FLOPs (decay, two moments, bias correction, sqrt, divide, update);
  // read p, g, m, v and write p, m, v: 7 floats.
  KernelScope k("adamw", 12.0 * n, 7.0 * 4.0 * n);
  check_same_size("adamw_update", param, grad, "grad");
  check_same_size("adamw_update", param, m, "first moment m");
  check_same_size("adamw_update", param, v, "second moment v");
  if (step < 1) throw std::invalid_argument(fmt::format("adamw_update: step {} < 1", step));
  if (!param.has_data()) return;  // phantom: cost only

  // Early steps see m and v still biased towards their zero start; dividing by these undoes it.
  const double bias1 = math::adamw_bias_correction(beta1, step);
  const double bias2 = math::adamw_bias_correction(beta2, step);
  if (on_cuda(param)) {
    cuda_entry(&CudaKernels::adamw, "adamw_update")(param.f32(), grad.f32(), m.f32(), v.f32(), n,
                                                    lr, beta1, beta2, eps, weight_decay, bias1,
                                                    bias2);
    return;
  }
  check_host("adamw_update", param);
  cpu::adamw(param.f32(), grad.f32(), m.f32(), v.f32(), n, lr, beta1, beta2, eps, weight_decay,
             bias1, bias2);
}

}  // namespace mgpu::ops

namespace mgpu::cpu {

void sgd_momentum(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                  float momentum, float weight_decay) {
  ops::sgd_loop(param, grad, momentum_buf, n, lr, momentum, weight_decay);
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, double bias1, double bias2) {
  const float decay = math::adamw_decay(lr, weight_decay);
  ops::adamw_loop(param, grad, m, v, n, lr, beta1, beta2, eps, decay, bias1, bias2);
}

}  // namespace mgpu::cpu

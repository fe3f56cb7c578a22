// The only math the collectives do: add a received chunk, divide for avg. Host tensors get a
// loop; CUDA tensors (several ranks sharing one GPU, "shared-GPU mode") get the installed CUDA
// axpy/scale kernels, queued on the rank's compute stream like any other op.
#include <stdexcept>

#include "core/comm/local/algorithms.h"
#include "core/ops/cuda_table.h"

namespace mgpu::comm::local {

namespace {
bool has_values(const Tensor& t) {
  return t.has_data() && t.numel() > 0;
}

bool on_cuda(const Tensor& t) {
  if (t.device().kind != DeviceKind::cuda) return false;
  if (!cuda_kernels().axpy || !cuda_kernels().scale)
    throw std::logic_error("local collectives on " + t.device().str() +
                           " need the CUDA kernels (call mgpu::cuda::install() first)");
  return true;
}
}  // namespace

void add_into(Tensor& acc, const Tensor& x) {
  if (!has_values(acc)) return;
  if (on_cuda(acc)) {
    if (x.device().kind != DeviceKind::cuda)
      throw std::logic_error("add_into: a cuda accumulator needs a cuda chunk, not " +
                             x.device().str());
    cuda_kernels().axpy(acc.f32(), 1.0f, x.f32(), acc.numel());
    return;
  }
  float* a = acc.f32();
  const float* b = x.f32();
  for (int64_t i = 0; i < acc.numel(); ++i) a[i] += b[i];
}

void scale(Tensor& t, float factor) {
  if (!has_values(t)) return;
  if (on_cuda(t)) {
    cuda_kernels().scale(t.f32(), factor, t.numel());
    return;
  }
  float* a = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) a[i] *= factor;
}

}  // namespace mgpu::comm::local

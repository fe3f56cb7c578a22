// The only math the collectives do: add a received chunk, divide (or scale) for avg. Host tensors
// get a loop; CUDA tensors (several ranks sharing one GPU, "shared-GPU mode") get the installed
// CUDA axpy/scale kernels, queued on the rank's compute stream like any other op.
#include <stdexcept>
#include <vector>

#include "core/comm/algorithms/algorithms.h"
#include "core/ops/cuda_table.h"

namespace mgpu::comm::algorithms {

// Loops over restrict pointers: the compiler vectorises them (no aliasing to rule out). The add
// runs in blocks of 16 so that -O2 vectorises it too (GCC's cheap cost model at -O2 skips loops
// whose trip count needs a scalar epilogue); each element is still acc[i] + x[i].
void add_floats(float* __restrict acc, const float* __restrict x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[i + j] += x[i + j];
  for (; i < n; ++i) acc[i] += x[i];
}

namespace {
void scale_floats(float* __restrict a, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] *= factor;
}

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
  add_floats(acc.f32(), x.f32(), acc.numel());
}

void scale(Tensor& t, float factor) {
  if (!has_values(t)) return;
  if (on_cuda(t)) {
    cuda_kernels().scale(t.f32(), factor, t.numel());
    return;
  }
  scale_floats(t.f32(), factor, t.numel());
}

}  // namespace mgpu::comm::algorithms

namespace mgpu::comm {

void divide(Tensor& t, float divisor) {
  if (!algorithms::has_values(t)) return;
  if (t.device().kind == DeviceKind::cpu) {
    float* v = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] /= divisor;
    return;
  }
  std::vector<float> v = t.to_vector();  // no divide kernel: the host divides, then copies back
  for (float& x : v) x /= divisor;
  device_memory_hooks(t.device().kind).copy(t.raw(), v.data(), t.bytes());
}

}  // namespace mgpu::comm

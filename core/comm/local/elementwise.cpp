// The only math the collectives do: add a received chunk, divide for avg.
#include <stdexcept>

#include "core/comm/local/algorithms.h"

namespace mgpu::comm::local {

namespace {
bool host_data(const Tensor& t) {
  if (!t.has_data() || t.numel() == 0) return false;
  if (t.device().kind != DeviceKind::cpu)
    throw std::logic_error("local collectives reduce host tensors only (device " +
                           t.device().str() + "); use the nccl backend for cuda");
  return true;
}
}  // namespace

void add_into(Tensor& acc, const Tensor& x) {
  if (!host_data(acc)) return;
  float* a = acc.f32();
  const float* b = x.f32();
  for (int64_t i = 0; i < acc.numel(); ++i) a[i] += b[i];
}

void scale(Tensor& t, float factor) {
  if (!host_data(t)) return;
  float* a = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) a[i] *= factor;
}

}  // namespace mgpu::comm::local

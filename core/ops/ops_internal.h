// Internal to core/ops/*_ops.cpp and ops.cpp: the dispatch steps every op shares (shape helpers,
// the CPU-or-CUDA switch, the fp32 staging of 2-byte tensors). One home, so that the unity build
// sees each once; the plain functions are defined in ops.cpp.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/cuda_table.h"
#include "core/ops/ops.h"
#include "core/runtime/allocator.h"

namespace mgpu::ops::detail {

// Bytes per element of the op's main tensor: the modeled clock charges memory traffic by size.
double elem_bytes(const Tensor& t);

// The CUDA kernel for `op`, or a clear error when none is installed yet.
template <class Fn>
Fn cuda_fn(Fn CudaKernels::*entry, const char* op) {
  Fn fn = cuda_kernels().*entry;
  if (!fn)
    throw std::runtime_error(fmt::format(
        "{}: this op has no CUDA kernel yet (run on --device cpu or phantom, or add one in "
        "core/ops/cuda/ and install it with install_cuda_kernels)",
        op));
  return fn;
}

// Mixed precision: the kernels compute in fp32. A 2-byte tensor is widened into an fp32 copy
// before the kernel and, when the kernel writes it, rounded back afterwards, so every store rounds
// exactly once: what a GPU kernel does when it loads bf16, computes in fp32 registers and stores
// bf16. On the CPU the copy is host memory; on cuda it is a device buffer from the device memory
// hooks, filled and emptied by the table's convert kernel (the same rounding code,
// core/ops/math/cast.h). Either way it is outside the allocator: in a fused 2-byte kernel it would
// be registers, not part of the model's memory. fp32 tensors pass straight through.
class Fp32Staging {
 public:
  Fp32Staging() : exceptions_(std::uncaught_exceptions()) {}
  Fp32Staging(const Fp32Staging&) = delete;
  Fp32Staging& operator=(const Fp32Staging&) = delete;
  float* in(const Tensor& t) { return stage(t, false); }
  float* out(Tensor& t) { return stage(t, true); }  // loaded too: some kernels accumulate
  // Rounds the written copies back. An op that threw stores nothing (and must not throw twice).
  ~Fp32Staging() noexcept(false) {
    if (std::uncaught_exceptions() > exceptions_) return;
    for (Staged& s : staged_)
      if (s.written) store_back(s);
  }

 private:
  struct DeviceRelease {
    int device;
    void operator()(void* p) const { device_memory_hooks(DeviceKind::cuda).release(p, device); }
  };
  struct Staged {
    Tensor tensor;
    float* values;
    bool written;
    std::vector<float> host;                             // --device cpu
    std::unique_ptr<void, DeviceRelease> device_copy{};  // --device cuda
  };

  float* stage(const Tensor& t, bool written) {
    if (t.dtype() == DType::f32) return const_cast<float*>(t.f32());
    for (Staged& s : staged_)  // the same tensor passed twice (in place): one buffer, as in fp32
      if (s.tensor.same_view(t)) {
        s.written = s.written || written;
        return s.values;
      }
    Staged& s = staged_.emplace_back(Staged{t, nullptr, written});
    if (t.device().kind == DeviceKind::cuda) {
      const int device = t.device().index;
      if (t.numel() > 0)
        s.device_copy = {device_memory_hooks(DeviceKind::cuda)
                             .allocate(t.numel() * int64_t{sizeof(float)}, device),
                         DeviceRelease{device}};
      s.values = static_cast<float*>(s.device_copy.get());
      cuda_fn(&CudaKernels::convert, "bf16/fp16 staging")(s.values, DType::f32, t.raw(), t.dtype(),
                                                          t.numel());
      return s.values;
    }
    s.host.resize(size_t(t.numel()));
    s.values = s.host.data();
    t.read_f32(s.values, t.numel());
    return s.values;
  }
  static void store_back(Staged& s) {
    if (s.tensor.device().kind == DeviceKind::cuda)
      cuda_fn(&CudaKernels::convert, "bf16/fp16 staging")(s.tensor.raw(), s.tensor.dtype(),
                                                          s.values, DType::f32, s.tensor.numel());
    else
      s.tensor.write_f32(s.values, s.tensor.numel());
  }

  std::deque<Staged> staged_;  // a deque: earlier buffers keep their address
  int exceptions_;
};

void check(bool ok, const char* op, const std::string& what);

int64_t last_dim(const Tensor& t);
int64_t row_count(const Tensor& t);

// Runs the CPU kernel or the CUDA one with the same arguments. Phantom is handled by callers
// (they return right after their KernelScope).
template <class Fn, class... Args>
auto run(const Tensor& t, const char* op, Fn cpu_kernel, Fn CudaKernels::*cuda_entry,
         Args&&... args) {
  if (t.device().kind == DeviceKind::cuda)
    return cuda_fn(cuda_entry, op)(std::forward<Args>(args)...);
  return cpu_kernel(std::forward<Args>(args)...);
}

// True when there is math to do (not phantom).
bool has_math(const Tensor& t);

}  // namespace mgpu::ops::detail

namespace mgpu::ops {
// The op files call the helpers by their short names.
using detail::check;
using detail::cuda_fn;
using detail::elem_bytes;
using detail::Fp32Staging;
using detail::has_math;
using detail::last_dim;
using detail::row_count;
using detail::run;
}  // namespace mgpu::ops

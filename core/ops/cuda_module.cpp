#include "core/ops/cuda_module.h"

#include <stdexcept>

#include "core/runtime/gpu.h"

#ifdef MGPU_HAVE_CUDA
#include <mutex>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda_emulation.h"
#include "core/runtime/cuda/caching_allocator.h"
#endif

namespace mgpu::cuda {

#ifdef MGPU_HAVE_CUDA
bool install() {
  // Table and hooks first, unconditionally: they need no GPU to be installed, only to run. An
  // emulated run (cuda_emulation.h) may have replaced them since: the real ones go back.
  static std::once_flag once;
  static std::mutex reinstall;
  const auto install_real = [] {
    install_cuda_kernels(kernel_table());
    set_device_memory_hooks(DeviceKind::cuda, caching_allocator_hooks());
    emulation_uninstalled();
  };
  std::call_once(once, install_real);
  if (emulation_installed()) {
    std::lock_guard lock(reinstall);
    if (emulation_installed()) install_real();
  }
  return device_count() > 0;
}
#else
bool install() {
  return false;
}
Calibration calibrate() {
  throw std::runtime_error("this build has no CUDA support (rebuild with the CUDA toolkit)");
}
#endif

}  // namespace mgpu::cuda

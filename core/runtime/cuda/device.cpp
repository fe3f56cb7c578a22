// Device discovery (installing the CUDA module and `mgpu calibrate`'s measurements are the ops':
// core/ops/cuda_module.h).
#include <fmt/format.h>

#include "core/runtime/cuda/streams.h"
#include "core/runtime/gpu.h"

namespace mgpu::cuda {

bool built_with_cuda() {
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the error, report none
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return fmt::format("{} (sm_{}{}, {:.1f} GiB)", prop.name, prop.major, prop.minor,
                     static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

MemInfo memory_info(int device) {
  int previous = 0;
  cudaGetDevice(&previous);
  MemInfo info;
  size_t free = 0, total = 0;
  if (cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    info.free = static_cast<int64_t>(free);
    info.total = static_cast<int64_t>(total);
  }
  cudaSetDevice(previous);
  return info;
}

}  // namespace mgpu::cuda

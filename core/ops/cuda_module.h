// The CUDA module: installing the ops' kernel table and the device's memory hooks, and
// `mgpu calibrate`'s measurements of the kernels. Usable from any
// file (CUDA build or not); without CUDA it installs nothing and says "no GPU":
//   if (!mgpu::cuda::install()) { /* one clear line, exit 2 / skip */ }
// It lives with the ops (the kernels it installs), above the rank context that only discovers
// devices (core/runtime/gpu.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/runtime/profile.h"

namespace mgpu::cuda {

// Installs the CUDA kernel table (install_cuda_kernels) and the caching allocator's memory hooks
// for DeviceKind::cuda, then counts the GPUs. The table and hooks are installed FIRST, so even on a
// machine without a GPU they are in place (a test can check the table is complete). Returns true
// when at least one GPU is usable. Safe to call repeatedly and from several threads.
bool install();

// `mgpu calibrate`: measures this GPU and returns a HardwareProfile (device 0). Throws
// std::runtime_error without a GPU.
struct Calibration {
  HardwareProfile profile;
  double gemm_tflops = 0;    // cuBLAS SGEMM 4096^3, fp32
  double copy_gbps = 0;      // device-to-device cudaMemcpy, GB/s (read + write)
  double launch_us = 0;      // empty kernel launch + completion, microseconds
  int64_t memory_bytes = 0;  // total device memory
  std::string device;
};
Calibration calibrate();

}  // namespace mgpu::cuda

// The CUDA module's public face, usable from any file (CUDA build or not). In a build without
// CUDA every function here says "no GPU", so callers (the CLI, World, tests) need no #ifdef:
//   if (!mgpu::cuda::install()) { /* one clear line, exit 2 / skip */ }
// The implementation lives in core/runtime/cuda/ (built only with CUDA); gpu.cpp holds the stubs.
#pragma once
#include <cstdint>
#include <string>

#include "core/runtime/profile.h"

namespace mgpu::cuda {

// True when this binary was compiled with CUDA (MGPU_HAVE_CUDA).
bool built_with_cuda();

// Installs the CUDA kernel table (install_cuda_kernels) and the caching allocator's memory hooks
// for DeviceKind::cuda, then counts the GPUs. The table and hooks are installed FIRST, so even on a
// machine without a GPU they are in place (a test can check the table is complete). Returns true
// when at least one GPU is usable. Safe to call repeatedly and from several threads.
bool install();

// Number of usable CUDA devices (0 without CUDA or on error).
int device_count();

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" for device k; "" without CUDA.
std::string device_name(int device);

// cudaMemGetInfo for display: bytes free and total on a device (0, 0 without CUDA).
struct MemInfo {
  int64_t free = 0;
  int64_t total = 0;
};
MemInfo memory_info(int device);

// Waits for all work queued on the calling rank's compute stream (no-op without CUDA).
void synchronize();

// The cuda clock's marks: a timing event recorded on the calling rank's compute stream, placed in
// time once the GPU has passed it. Without CUDA a mark is null and no time passes between marks.
using Mark = void*;  // a cudaEvent_t
Mark record_mark();
void wait_for(Mark m);                       // the host waits until the GPU has passed m
double seconds_between(Mark from, Mark to);  // both passed (wait_for(to) first)
void release_mark(Mark m);                   // null is fine; a pending mark is freed when passed

// Bytes held by the caching allocator in free lists, all devices (for display and tests).
int64_t cached_bytes();
// Returns every cached free block to the driver (cudaFree).
void release_cached();

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

// The CUDA devices as the rank context sees them, usable from any file (CUDA build or not). In a
// build without CUDA every function here says "no GPU", so callers (the CLI, World, tests) need no
// #ifdef. The implementation lives in core/runtime/cuda/ (built only with CUDA); gpu.cpp holds the
// stubs. Installing the kernels and measuring them are the ops' (core/ops/cuda_module.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/runtime/profile.h"

namespace mgpu::cuda {

// True when this binary was compiled with CUDA (MGPU_HAVE_CUDA).
bool built_with_cuda();

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

}  // namespace mgpu::cuda

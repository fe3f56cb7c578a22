// Per-rank CUDA streams and error checks, for code compiled with CUDA only.
//
// Every rank thread owns two streams on its GPU: `compute` (all kernels, memsets and host copies
// of that rank) and `comm` (collectives). Putting ALL of a rank's kernels on one stream makes
// them run in program order, exactly like the CPU kernels, so no kernel needs its own sync.
// The comm stream waits for the compute stream before each collective (comm_ready_stream).
//
// Which GPU? The calling thread's rank context (current_rank().device, cuda:k) if it has one;
// otherwise (a test or tool with no rank installed) the thread's current CUDA device.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace mgpu::cuda {

// Throws std::runtime_error("cudaMalloc: out of memory") style messages.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);

// The GPU the calling thread works on; also makes it the thread's current device.
int current_device();

// The calling thread's compute / comm stream on current_device() (created lazily, destroyed
// when the thread exits).
cudaStream_t compute_stream();
cudaStream_t comm_stream();
// The calling thread's compute stream on a given GPU (makes it the current device).
cudaStream_t compute_stream(int device);
// The calling thread's compute stream on `device` if it already has one, else nullptr. Never
// creates anything and never throws (the allocator calls it from destructors).
cudaStream_t existing_compute_stream(int device) noexcept;

// Makes `stream` wait (on the GPU, not the host) for everything queued so far on the compute
// stream, and returns it. Collectives call this so they read finished gradients.
cudaStream_t comm_ready_stream(cudaStream_t stream);

// The calling thread's cuBLAS handle for current_device(), bound to compute_stream().
cublasHandle_t cublas();

// A per-thread device buffer that only grows (scratch for token ids, attention dS, losses).
// Work on the compute stream is ordered, so reusing it call after call is safe.
void* scratch(int slot, size_t bytes);
enum ScratchSlot {
  kScratchTokens = 0,
  kScratchTargets,
  kScratchAttention,
  kScratchReduce,
  kNumScratch
};

}  // namespace mgpu::cuda

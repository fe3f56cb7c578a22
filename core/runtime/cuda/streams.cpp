// Streams, cuBLAS handles and scratch buffers: one set per (thread, GPU), created on first use and
// released by RAII when the thread ends. Rank threads live for a World::run, so this is cheap.
#include "core/runtime/cuda/streams.h"

#include <map>
#include <memory>

#include <fmt/format.h>

#include "core/runtime/context.h"
#include "core/runtime/cuda/caching_allocator.h"
#include "core/runtime/gpu.h"

namespace mgpu::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(status)));
}

namespace {

// Everything one thread needs on one GPU. Destroyed at thread exit (thread_local map below).
struct ThreadDevice {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cudaEvent_t compute_done = nullptr;  // recorded by comm_ready_stream
  cublasHandle_t blas = nullptr;
  void* scratch[kNumScratch] = {};
  size_t scratch_bytes[kNumScratch] = {};

  explicit ThreadDevice(int d) : device(d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    // Non-blocking: our streams never wait on the legacy default stream (NCCL's neither).
    check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate(compute)");
    check(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking), "cudaStreamCreate(comm)");
    check(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~ThreadDevice() {
    cudaSetDevice(device);
    if (compute) cudaStreamSynchronize(compute);
    if (compute) retire_stream(compute);  // its cached blocks become reusable by any stream
    for (void* p : scratch)
      if (p) cudaFree(p);
    if (blas) cublasDestroy(blas);
    if (compute_done) cudaEventDestroy(compute_done);
    if (comm) cudaStreamDestroy(comm);
    if (compute) cudaStreamDestroy(compute);
  }
  ThreadDevice(const ThreadDevice&) = delete;
  ThreadDevice& operator=(const ThreadDevice&) = delete;
};

std::map<int, std::unique_ptr<ThreadDevice>>& per_device() {
  thread_local std::map<int, std::unique_ptr<ThreadDevice>> map;
  return map;
}

ThreadDevice& thread_device(int d) {
  auto& slot = per_device()[d];
  if (!slot) slot = std::make_unique<ThreadDevice>(d);
  return *slot;
}

ThreadDevice& thread_device() {
  return thread_device(current_device());
}

}  // namespace

int current_device() {
  const Device& dev = current_rank().device;
  int d = 0;
  if (dev.kind == DeviceKind::cuda) {
    d = dev.index;
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess || now != d) check(cudaSetDevice(d), "cudaSetDevice");
  } else {
    check(cudaGetDevice(&d), "cudaGetDevice");
  }
  return d;
}

cudaStream_t compute_stream() {
  return thread_device().compute;
}

cudaStream_t compute_stream(int device) {
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || now != device)
    check(cudaSetDevice(device), "cudaSetDevice");
  return thread_device(device).compute;
}

cudaStream_t existing_compute_stream(int device) noexcept {
  auto& map = per_device();
  auto it = map.find(device);
  return it != map.end() && it->second ? it->second->compute : nullptr;
}
cudaStream_t comm_stream() {
  return thread_device().comm;
}

cudaStream_t comm_ready_stream(cudaStream_t stream) {
  ThreadDevice& td = thread_device();
  check(cudaEventRecord(td.compute_done, td.compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(stream, td.compute_done, 0), "cudaStreamWaitEvent");
  return stream;
}

cublasHandle_t cublas() {
  ThreadDevice& td = thread_device();
  if (!td.blas) {
    check(cublasCreate(&td.blas), "cublasCreate");
    check(cublasSetStream(td.blas, td.compute), "cublasSetStream");
    // Plain FP32 math (no TF32) so results match the CPU reference tightly; the benchmark may
    // opt in with MGPU_TF32=1.
    const char* tf32 = std::getenv("MGPU_TF32");
    check(cublasSetMathMode(
              td.blas, tf32 && tf32[0] == '1' ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
  }
  return td.blas;
}

void* scratch(int slot, size_t bytes) {
  ThreadDevice& td = thread_device();
  if (td.scratch_bytes[slot] < bytes) {
    if (td.scratch[slot]) {
      check(cudaStreamSynchronize(td.compute), "cudaStreamSynchronize");  // old one may be in use
      check(cudaFree(td.scratch[slot]), "cudaFree(scratch)");
      td.scratch[slot] = nullptr;
    }
    check(cudaMalloc(&td.scratch[slot], bytes), "cudaMalloc(scratch)");
    td.scratch_bytes[slot] = bytes;
  }
  return td.scratch[slot];
}

void synchronize() {
  check(cudaStreamSynchronize(compute_stream()), "cudaStreamSynchronize");
}

Mark record_mark() {
  cudaEvent_t event = nullptr;
  check(cudaEventCreate(&event), "cudaEventCreate(mark)");
  check(cudaEventRecord(event, compute_stream()), "cudaEventRecord(mark)");
  return event;
}

void wait_for(Mark m) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(m)), "cudaEventSynchronize(mark)");
}

double seconds_between(Mark from, Mark to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)),
        "cudaEventElapsedTime");
  return static_cast<double>(ms) * 1e-3;
}

void release_mark(Mark m) {
  if (m) cudaEventDestroy(static_cast<cudaEvent_t>(m));
}

}  // namespace mgpu::cuda

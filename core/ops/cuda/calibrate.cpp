// `mgpu calibrate`'s measurements of GPU 0: cuBLAS SGEMM, device-to-device copies and an empty
// kernel's launch, as a HardwareProfile (core/ops/cuda_module.h).
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda_module.h"
#include "core/runtime/cuda/streams.h"
#include "core/runtime/gpu.h"

namespace mgpu::cuda {

namespace {

// A device buffer owned by RAII (calibration only; tensors use the caching allocator).
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(ptr); }
};

// Seconds per call of fn, timed with CUDA events on the compute stream after `warmup` calls.
template <class Fn>
double time_per_call(Fn fn, int warmup, int iters) {
  cudaStream_t s = compute_stream();
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, s), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) fn();
  check(cudaEventRecord(stop, s), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1000.0 / iters;
}

}  // namespace

Calibration calibrate() {
  if (device_count() == 0)
    throw std::runtime_error("no CUDA GPU found (cudaGetDeviceCount reports none)");
  check(cudaSetDevice(0), "cudaSetDevice");
  Calibration cal;
  cal.device = device_name(0);
  cal.memory_bytes = memory_info(0).total;

  // GEMM: 4096^3 SGEMM (FP32, no TF32), 2 n^3 FLOPs per call.
  {
    constexpr int64_t n = 4096;
    DeviceBuffer a(n * n * sizeof(float)), b(n * n * sizeof(float)), c(n * n * sizeof(float));
    double s = time_per_call(
        [&] { gemm(false, false, n, n, n, 1.0f, a.f(), n, 0, b.f(), n, 0, 0.0f, c.f(), n, 0, 1); },
        3, 10);
    cal.gemm_tflops = 2.0 * n * n * n / s / 1e12;
  }
  // Copy bandwidth: device-to-device 1 GiB; each byte is read once and written once.
  {
    constexpr size_t bytes = size_t{1} << 30;
    DeviceBuffer src(bytes), dst(bytes);
    double s = time_per_call(
        [&] {
          check(
              cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, compute_stream()),
              "cudaMemcpyAsync");
        },
        2, 10);
    cal.copy_gbps = 2.0 * bytes / s / 1e9;
  }
  // Launch overhead: 2000 empty kernels queued back to back, then one wait; the host time per
  // launch is what a tiny op costs an eager framework (the modeled clock's launch_overhead).
  {
    launch_empty_kernel();
    synchronize();
    constexpr int iters = 2000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) launch_empty_kernel();
    synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cal.launch_us = s / iters * 1e6;
  }

  HardwareProfile& p = cal.profile;
  p.name = "calibrated";
  p.description = fmt::format("measured by mgpu calibrate on {}", cal.device);
  p.peak_flops = cal.gemm_tflops * 1e12;
  p.mem_bandwidth = cal.copy_gbps * 1e9;
  p.launch_overhead = cal.launch_us * 1e-6;
  p.memory_capacity = cal.memory_bytes;
  p.ranks_per_node = std::max(1, device_count());
  // Links are not measured (that needs two GPUs and NCCL): keep a PCIe-like default the user may
  // edit; see docs/cuda.md.
  p.intra_node = {"unmeasured (edit me)", 25e9, 10e-6};
  p.inter_node = {"unmeasured (edit me)", 12.5e9, 20e-6};
  return cal;
}

}  // namespace mgpu::cuda

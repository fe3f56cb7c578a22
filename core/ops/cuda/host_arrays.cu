// The host arrays a kernel reads or fills (positions, row indices, scales, dot products: ops.h
// passes them in host memory, like token ids), moved through the rank's scratch buffers on its
// compute stream.
#include "core/ops/cuda/cuda_kernels.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

// From pageable memory cudaMemcpyAsync returns once the host data has been read, so the caller
// may reuse its buffer right away; the kernels queued after it on the stream see the copy.
void* host_to_scratch(const void* host, size_t bytes, int slot) {
  void* dev = scratch(slot, bytes);
  if (bytes > 0)
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, compute_stream()),
          "cudaMemcpyAsync(host array)");
  return dev;
}

void scratch_to_host(void* host, const void* dev, size_t bytes) {
  if (bytes == 0) return;
  cudaStream_t s = compute_stream();
  check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(result)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize(result)");
}

}  // namespace mgpu::cuda

// Mixed precision on the GPU: 2-byte storage (bf16 or fp16), fp32 arithmetic.
//
//  - convert: one thread per element (grid-stride), rounding with core/ops/math/cast.h, the code
//    the CPU's emulated storage uses, so a value stored on either side has the same bits (cuda's
//    own __float2bfloat16 would give NaNs other payloads). ops.cpp stages a 2-byte tensor into an
//    fp32 buffer with it before an fp32 kernel and rounds the result back after.
//  - count_nonfinite: the loss scaler's overflow check, counted where the gradients live; only
//    the count crosses to the host.
//  - matmul_2byte (written in gemm_attention.cu, beside the fp32 GEMM): cuBLAS reads and writes
//    the 2-byte type itself and accumulates in fp32, as mixed-precision training's GEMMs do.
//
// Neither kernel nor cuBLAS counts what rounding lost (fp16's flushed values); the stores are
// reported as unchecked (StoreCounters), so no lesson shows a partial count as a total.
//
// No float arithmetic here is rounded differently with or without fused multiply-add (the
// conversions are bit operations and one exact power-of-two product), so this file needs no
// --fmad flag to agree with the CPU bit for bit.
#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/math/cast.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

#define GRID_STRIDE(i, count)                                                   \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

__device__ float load_f32(const void* data, DType type, int64_t i) {
  if (type == DType::f32) return static_cast<const float*>(data)[i];
  return math::bits_2byte_to_f32(type, static_cast<const uint16_t*>(data)[i]);
}

__global__ void convert_kernel(void* dst, DType dst_type, const void* src, DType src_type,
                               int64_t count) {
  GRID_STRIDE(i, count) {
    const float value = load_f32(src, src_type, i);
    if (dst_type == DType::f32)
      static_cast<float*>(dst)[i] = value;
    else
      static_cast<uint16_t*>(dst)[i] = math::f32_to_2byte_bits(dst_type, value);
  }
}

void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count) {
  if (count <= 0) return;
  cudaStream_t stream = compute_stream();
  if (dst_type == src_type) {
    const size_t bytes = static_cast<size_t>(count) * (dst_type == DType::f32 ? 4 : 2);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "convert (copy)");
    return;
  }
  convert_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, dst_type, src, src_type, count);
  check(cudaGetLastError(), "convert_kernel");
  if (dst_type != DType::f32) count_unchecked_stores(count);
}

// Each thread counts its elements, each warp adds its threads' counts, one atomic per warp:
// integer additions, so the count is exact whatever the order.
__global__ void count_nonfinite_kernel(unsigned long long* total, const void* x, DType type,
                                       int64_t count) {
  unsigned long long bad = 0;
  GRID_STRIDE(i, count) bad += math::is_nonfinite(load_f32(x, type, i)) ? 1 : 0;
  for (int offset = 16; offset > 0; offset /= 2) bad += __shfl_down_sync(0xffffffffu, bad, offset);
  if (threadIdx.x % 32 == 0 && bad) atomicAdd(total, bad);
}

int64_t count_nonfinite(const void* x, DType type, int64_t count) {
  if (count <= 0) return 0;
  cudaStream_t stream = compute_stream();
  auto* total =
      static_cast<unsigned long long*>(scratch(kScratchReduce, sizeof(unsigned long long)));
  check(cudaMemsetAsync(total, 0, sizeof *total, stream), "cudaMemsetAsync(count_nonfinite)");
  count_nonfinite_kernel<<<blocks_for(count), kThreads, 0, stream>>>(total, x, type, count);
  check(cudaGetLastError(), "count_nonfinite_kernel");
  unsigned long long host_total = 0;
  check(cudaMemcpyAsync(&host_total, total, sizeof host_total, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(count_nonfinite)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(count_nonfinite)");
  return static_cast<int64_t>(host_total);
}

}  // namespace

void fill_precision_kernels(CudaKernels& table) {
  table.convert = convert;
  table.count_nonfinite = count_nonfinite;
  table.matmul_2byte = matmul_2byte;  // gemm_attention.cu, beside the fp32 GEMM
}

}  // namespace mgpu::cuda

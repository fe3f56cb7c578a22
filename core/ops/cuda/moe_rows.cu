// A mixture of experts' row permutation on the GPU (core/ops/ops.h gather_rows, combine_rows,
// gathered_row_dots). The row arithmetic is core/ops/math/rows.h's, the CPU kernels' own.
//  - gather: one thread per element of the gathered rows;
//  - combine: several slots may land on one token's row, so instead of float atomics (whose order
//    of additions changes run to run) the host lists, per output row, the slots that land on it
//    in ascending order (math::slots_by_row), and one thread per output element adds them in
//    that order (math::combined_value): the CPU's order, and the same bits on every run;
//  - dots: one thread per slot, the result copied back (the caller needs it on the host).
// Built with -fmad=false (core/CMakeLists.txt), as the CPU side is built without contraction.
#include <vector>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/math/rows.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

namespace {

constexpr int kThreads = 256;

// The scratch slots of the host arrays: row indices (and combine's lists) like token ids, the
// scales like targets, the dot products like the losses' reduction.
constexpr int kScratchIndex = kScratchTokens;
constexpr int kScratchScale = kScratchTargets;
constexpr int kScratchDots = kScratchReduce;

#define GRID_STRIDE(e, count)                                                   \
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < (count); \
       e += int64_t(gridDim.x) * blockDim.x)

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

void check_launch(const char* op) {
  check(cudaGetLastError(), op);
}

template <class T>
const T* to_device(const T* host, int64_t count, int slot) {
  return static_cast<const T*>(host_to_scratch(host, size_t(count) * sizeof(T), slot));
}

__global__ void gather_rows_kernel(float* rows, const float* inp, const int32_t* index,
                                   const float* scale, int64_t n, int64_t c) {
  GRID_STRIDE(e, n * c) {
    const int64_t i = e / c, j = e % c;
    rows[e] = math::row_scale(scale, i) * inp[int64_t{index[i]} * c + j];
  }
}

// slots[begin[r] .. begin[r + 1]) are the slots landing on output row r, ascending.
__global__ void combine_rows_kernel(float* out, int64_t out_rows, const float* rows,
                                    const int32_t* begin, const int32_t* slots, const float* scale,
                                    int64_t c) {
  GRID_STRIDE(e, out_rows * c) {
    const int64_t r = e / c;
    out[e] = math::combined_value(rows, c, e % c, slots, begin[r], begin[r + 1], scale);
  }
}

__global__ void row_dots_kernel(float* dots, const float* a, const int32_t* index, const float* b,
                                int64_t n, int64_t c) {
  GRID_STRIDE(i, n) dots[i] = math::dot(a + int64_t{index[i]} * c, b + i * c, c);
}

void gather_rows(float* rows, const float* inp, const int32_t* index, const float* scale, int64_t n,
                 int64_t c) {
  if (n * c == 0) return;
  const int32_t* dev_index = to_device(index, n, kScratchIndex);
  const float* dev_scale = scale ? to_device(scale, n, kScratchScale) : nullptr;
  gather_rows_kernel<<<blocks_for(n * c), kThreads, 0, compute_stream()>>>(rows, inp, dev_index,
                                                                           dev_scale, n, c);
  check_launch("gather_rows");
}

void combine_rows(float* out, int64_t out_rows, const float* rows, const int32_t* index,
                  const float* scale, int64_t n, int64_t c) {
  if (out_rows * c == 0) return;
  std::vector<int32_t> lists(size_t(out_rows + 1 + n));  // [begin (out_rows + 1) | slots (n)]
  math::slots_by_row(index, n, out_rows, lists.data(), lists.data() + out_rows + 1);
  const int32_t* dev_lists = to_device(lists.data(), int64_t(lists.size()), kScratchIndex);
  const float* dev_scale = scale && n > 0 ? to_device(scale, n, kScratchScale) : nullptr;
  combine_rows_kernel<<<blocks_for(out_rows * c), kThreads, 0, compute_stream()>>>(
      out, out_rows, rows, dev_lists, dev_lists + out_rows + 1, dev_scale, c);
  check_launch("combine_rows");
}

void gathered_row_dots(float* dots, const float* a, const int32_t* index, const float* b, int64_t n,
                       int64_t c) {
  if (n == 0) return;
  const int32_t* dev_index = to_device(index, n, kScratchIndex);
  auto* dev_dots = static_cast<float*>(scratch(kScratchDots, size_t(n) * sizeof(float)));
  row_dots_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(dev_dots, a, dev_index, b, n,
                                                                    c);
  check_launch("gathered_row_dots");
  scratch_to_host(dots, dev_dots, size_t(n) * sizeof(float));
}

}  // namespace

void fill_moe_kernels(CudaKernels& table) {
  table.gather_rows = gather_rows;
  table.combine_rows = combine_rows;
  table.gathered_row_dots = gathered_row_dots;
}

}  // namespace mgpu::cuda

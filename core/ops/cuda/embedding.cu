// The CUDA embedding: the lookup (one thread per element) and its scatter-add, grouped by token
// id on the host so that it adds in the CPU's order without atomics.
#include "core/ops/cuda/token_groups.h"
#include "core/ops/math/elementwise.h"

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/kernels_internal.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

using detail::blocks_for;
using detail::check_launch;
using detail::kThreads;
using detail::tokens_to_device;

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int64_t t, int64_t c, int64_t count) {
  GRID_STRIDE(i, count) {
    int64_t row = i / c, j = i % c;  // row = b * t + position
    const float token = wte[static_cast<int64_t>(tokens[row]) * c + j];
    out[i] = wpe ? math::embedding_value(token, wpe[(row % t) * c + j]) : token;  // null: rope
  }
}

// The backward scatter-add, in the CPU's order without atomics. dwte: the rows of the batch are
// grouped by token id on the host (token_groups.h: `rows` lists them by token, ascending within a
// token, group g is rows[start[g] .. start[g+1]) of token group_token[g]); thread (g, j) adds its
// group's rows in that order into dwte[token, j]. dwpe: thread (position, j) adds the batch's rows
// at that position, batch 0 first.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int32_t* rows,
                                              const int32_t* group_token, const int32_t* start,
                                              int64_t groups, int64_t c) {
  GRID_STRIDE(i, groups * c) {
    const int64_t g = i / c, j = i % c;
    float* w = dwte + static_cast<int64_t>(group_token[g]) * c + j;
    float sum = *w;
    for (int32_t k = start[g]; k < start[g + 1]; k++)
      sum = math::accumulate(sum, dout[static_cast<int64_t>(rows[k]) * c + j]);
    *w = sum;
  }
}

__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int64_t b, int64_t t,
                                              int64_t c) {
  GRID_STRIDE(i, t * c) {  // i = position * c + j
    float sum = dwpe[i];
    for (int64_t bi = 0; bi < b; bi++) sum = math::accumulate(sum, dout[bi * t * c + i]);
    dwpe[i] = sum;
  }
}

// The batch's rows grouped by token id (token_groups.h), copied into the tokens' scratch buffer.
struct TokenGroups {
  const int32_t* rows;
  const int32_t* group_token;
  const int32_t* start;
  int64_t groups;
};
TokenGroups token_groups_to_device(const int32_t* tokens, int64_t count) {
  const TokenGroupsLayout layout = group_rows_by_token(tokens, count);
  const size_t bytes = layout.packed.size() * sizeof(int32_t);
  auto* dev = static_cast<int32_t*>(scratch(kScratchTokens, bytes));
  // From pageable memory the copy returns once `layout` has been read: it may go out of scope.
  check(cudaMemcpyAsync(dev, layout.packed.data(), bytes, cudaMemcpyHostToDevice, compute_stream()),
        "cudaMemcpyAsync(token groups)");
  const auto offset = [&](const int32_t* p) { return dev + (p - layout.packed.data()); };
  return {dev, offset(layout.group_token()), offset(layout.start()), layout.groups};
}

}  // namespace

namespace detail {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c) {
  const int64_t count = b * t * c;
  if (count == 0) return;
  const int32_t* dev_tokens = tokens_to_device(tokens, b * t, kScratchTokens);
  embedding_forward_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(
      out, dev_tokens, wte, wpe, t, c, count);
  check_launch("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c) {
  if (b * t * c == 0) return;
  const TokenGroups g = token_groups_to_device(tokens, b * t);
  cudaStream_t s = compute_stream();
  embedding_backward_wte_kernel<<<blocks_for(g.groups * c), kThreads, 0, s>>>(
      dwte, dout, g.rows, g.group_token, g.start, g.groups, c);
  if (dwpe)  // null under rotary positions: no table
    embedding_backward_wpe_kernel<<<blocks_for(t * c), kThreads, 0, s>>>(dwpe, dout, b, t, c);
  check_launch("embedding_backward");
}

}  // namespace detail

}  // namespace mgpu::cuda

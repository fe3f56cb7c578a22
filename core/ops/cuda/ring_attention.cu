// Ring attention's four ops on the GPU (core/ops/ops.h attention_block_forward/backward,
// attention_merge, copy_columns). The arithmetic is core/ops/math/attention.h's, the CPU kernels'
// own, down to each thread's share (block_forward_channel, dq_channel, dkv_channel, which the
// CPU tests run in this decomposition); this file holds only the thread layout, chosen so that
// every sum is added in the CPU's order (no float atomics, no tree reductions):
//  - block forward: one thread block per (batch, head, query) row. Threads stride over the keys
//    for the scores; then each thread owns output channels and walks the visible keys in
//    ascending order for the max, the softmax sum and the weighted values;
//  - block backward: per row, each visible pair's probability and dS go to scratch, then each
//    thread's dQ channel walks the keys in order; a second kernel, one thread block per (batch,
//    kv head, key), adds dK and dV over the queries that see the key, the query group's heads in
//    ascending order and each head's queries in ascending order;
// Grouped-query attention: query head h reads kv head h / group from kv's rows of 2 kv_c (k | v,
// kv_c = kv_heads * head size); group 1 is multi-head attention.
//  - merge: one thread block per row; copy_columns: one thread per element.
// Built with -fmad=false (core/CMakeLists.txt), as the CPU side is built without contraction, so
// the results differ from the CPU's only where CUDA's expf/logf round differently from the host's.
#include <vector>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/math/attention.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

namespace {

constexpr int kRowThreads = 64;    // threads per (batch, head, row) block
constexpr int kCopyThreads = 256;  // threads per block of the element-wise copy

// The scratch slots: positions are host arrays like token ids; the backward's per-pair p and dS
// are attention scratch, as the dS of full attention's backward (gemm_attention.cu).
constexpr int kScratchPositions = kScratchTokens;
constexpr int kScratchPairs = kScratchAttention;

void check_launch(const char* op) {
  check(cudaGetLastError(), op);
}

// q_pos then kv_pos, in one copy: the kernels read them from the device.
const int32_t* positions_to_device(const int32_t* q_pos, int64_t tq, const int32_t* kv_pos,
                                   int64_t tk) {
  std::vector<int32_t> both(q_pos, q_pos + tq);
  both.insert(both.end(), kv_pos, kv_pos + tk);
  return static_cast<const int32_t*>(
      host_to_scratch(both.data(), both.size() * sizeof(int32_t), kScratchPositions));
}

// The (batch, head, row) a thread block of a row kernel works on, and its head's offsets.
struct HeadRow {
  int64_t bi, h, i;  // batch row, head, row (query or key) inside the block
  int64_t row;       // (bi * heads + h) * rows + i: the lse / score row
};
__device__ HeadRow head_row(int64_t rows, int64_t heads) {
  HeadRow r;
  r.row = blockIdx.x;
  r.i = r.row % rows;
  r.h = (r.row / rows) % heads;
  r.bi = r.row / rows / heads;
  return r;
}

// ---- forward --------------------------------------------------------------------------------

__global__ void block_forward_kernel(float* out, float* lse, float* scores, const float* q,
                                     const float* kv, const int32_t* q_pos, const int32_t* kv_pos,
                                     int64_t tq, int64_t tk, int64_t c, int64_t heads,
                                     int64_t kv_heads, int64_t score_cols, float scale) {
  const HeadRow r = head_row(tq, heads);
  const int64_t hs = c / heads, kv_c = kv_heads * hs, group = heads / kv_heads;
  const float* qi = q + (r.bi * tq + r.i) * c + r.h * hs;
  // key j at j * 2 kv_c, its value at + kv_c
  const float* keys = kv + r.bi * tk * 2 * kv_c + r.h / group * hs;
  float* oi = out + (r.bi * tq + r.i) * c + r.h * hs;
  float* row = scores + r.row * score_cols;
  const int64_t n = math::visible_keys(kv_pos, tk, q_pos[r.i]);
  for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
    row[kv_pos[j]] = j < n ? math::scaled_score(qi, keys + j * 2 * kv_c, hs, scale)
                           : math::kMaskedScore;  // masked: probability 0
  __syncthreads();  // the row's scores, written by every thread, are read by every thread
  for (int64_t d = threadIdx.x; d < hs; d += blockDim.x) {
    const math::ChannelOut o =
        math::block_forward_channel(row, kv_pos, n, keys + kv_c + d, 2 * kv_c);
    oi[d] = o.out;
    if (d == 0) lse[r.row] = o.lse;
  }
}

// ---- backward -------------------------------------------------------------------------------

// Per query row: p and dS of each visible pair into pair_p / pair_ds ([rows, tk] each), then
// dQ += dS K.
__global__ void block_backward_query_kernel(float* dq, float* pair_p, float* pair_ds,
                                            const float* dout, const float* out, const float* q,
                                            const float* kv, const float* scores, const float* lse,
                                            const int32_t* q_pos, const int32_t* kv_pos, int64_t tq,
                                            int64_t tk, int64_t c, int64_t heads, int64_t kv_heads,
                                            int64_t score_cols, float scale) {
  const HeadRow r = head_row(tq, heads);
  const int64_t hs = c / heads, kv_c = kv_heads * hs, group = heads / kv_heads;
  const int64_t qi_at = (r.bi * tq + r.i) * c + r.h * hs;
  const float* keys = kv + r.bi * tk * 2 * kv_c + r.h / group * hs;
  const float* row = scores + r.row * score_cols;
  const int64_t n = math::visible_keys(kv_pos, tk, q_pos[r.i]);
  // D_i = dO_i . O_i over ALL keys: the softmax backward's row term, from the merged output.
  const float row_term = math::dot(dout + qi_at, out + qi_at, hs);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const math::PairGrad g = math::pair_grad(row[kv_pos[j]], lse[r.row], dout + qi_at,
                                             keys + j * 2 * kv_c + kv_c, hs, row_term, scale);
    pair_p[r.row * tk + j] = g.p;
    pair_ds[r.row * tk + j] = g.ds;
  }
  __syncthreads();  // every pair's dS of this row is read by every channel's thread
  for (int64_t d = threadIdx.x; d < hs; d += blockDim.x)
    dq[qi_at + d] = math::dq_channel(dq[qi_at + d], pair_ds + r.row * tk, n, keys + d, 2 * kv_c);
}

// Per (kv head, key): dK += dS^T Q and dV += P^T dO over the queries that see the key, the
// group's query heads in ascending order, each head's queries in ascending order.
__global__ void block_backward_key_kernel(float* dkv, const float* pair_p, const float* pair_ds,
                                          const float* dout, const float* q, const int32_t* q_pos,
                                          const int32_t* kv_pos, int64_t tq, int64_t tk, int64_t c,
                                          int64_t heads, int64_t kv_heads) {
  const HeadRow r = head_row(tk, kv_heads);  // r.i is the key, r.h the kv head
  const int64_t hs = c / heads, kv_c = kv_heads * hs, group = heads / kv_heads;
  const int64_t k_at = (r.bi * tk + r.i) * 2 * kv_c + r.h * hs, v_at = k_at + kv_c;
  const int64_t first = math::first_seeing_query(q_pos, tq, kv_pos[r.i]);
  if (first == tq) return;  // no query of this block sees the key
  for (int64_t h = r.h * group; h < (r.h + 1) * group; ++h) {
    // the pairs (first, key), (first + 1, key), ... lie tk apart; their queries' rows c apart
    const int64_t pair = ((r.bi * heads + h) * tq + first) * tk + r.i;
    const int64_t q_at = (r.bi * tq + first) * c + h * hs;
    for (int64_t d = threadIdx.x; d < hs; d += blockDim.x)
      math::dkv_channel(dkv + k_at + d, dkv + v_at + d, pair_p + pair, pair_ds + pair, tk,
                        q + q_at + d, dout + q_at + d, c, tq - first);
  }
}

// ---- merge and copy -------------------------------------------------------------------------

__global__ void merge_kernel(float* out, float* lse, const float* block_out, const float* block_lse,
                             int64_t t, int64_t c, int64_t heads) {
  const HeadRow r = head_row(t, heads);
  const int64_t hs = c / heads, at = (r.bi * t + r.i) * c + r.h * hs;
  math::MergeWeights w;
  const bool merged = math::merge_weights(lse[r.row], block_lse[r.row], &w);
  __syncthreads();      // every thread has read lse[row] before thread 0 overwrites it
  if (!merged) return;  // neither part saw a key
  for (int64_t d = threadIdx.x; d < hs; d += blockDim.x)
    out[at + d] = math::merged_value(w, out[at + d], block_out[at + d]);
  if (threadIdx.x == 0) lse[r.row] = w.lse;
}

__global__ void copy_columns_kernel(float* dst, int64_t dst_cols, int64_t dst_begin,
                                    const float* src, int64_t src_cols, int64_t src_begin,
                                    int64_t width, int64_t count, bool add) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / width, k = e % width;
    float& d = dst[r * dst_cols + dst_begin + k];
    const float s = src[r * src_cols + src_begin + k];
    d = add ? d + s : s;
  }
}

// ---- host wrappers (the CudaKernels signatures) ---------------------------------------------

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows);
}

void attention_block_forward(float* out, float* lse, float* scores, const float* q, const float* kv,
                             const int32_t* q_pos, const int32_t* kv_pos, int64_t b, int64_t tq,
                             int64_t tk, int64_t c, int64_t heads, int64_t kv_heads,
                             int64_t score_cols) {
  if (b * heads * tq == 0) return;
  const int32_t* pos = positions_to_device(q_pos, tq, kv_pos, tk);
  block_forward_kernel<<<row_blocks(b * heads * tq), kRowThreads, 0, compute_stream()>>>(
      out, lse, scores, q, kv, pos, pos + tq, tq, tk, c, heads, kv_heads, score_cols,
      math::attention_scale(c / heads));
  check_launch("attention_block_forward");
}

void attention_block_backward(float* dq, float* dkv, const float* dout, const float* out,
                              const float* q, const float* kv, const float* scores,
                              const float* lse, const int32_t* q_pos, const int32_t* kv_pos,
                              int64_t b, int64_t tq, int64_t tk, int64_t c, int64_t heads,
                              int64_t kv_heads, int64_t score_cols) {
  if (b * heads * tq == 0 || tk == 0) return;
  const int32_t* pos = positions_to_device(q_pos, tq, kv_pos, tk);
  const int64_t pairs = b * heads * tq * tk;
  auto* pair_p = static_cast<float*>(scratch(kScratchPairs, 2 * pairs * sizeof(float)));
  float* pair_ds = pair_p + pairs;
  cudaStream_t s = compute_stream();
  block_backward_query_kernel<<<row_blocks(b * heads * tq), kRowThreads, 0, s>>>(
      dq, pair_p, pair_ds, dout, out, q, kv, scores, lse, pos, pos + tq, tq, tk, c, heads, kv_heads,
      score_cols, math::attention_scale(c / heads));
  block_backward_key_kernel<<<row_blocks(b * kv_heads * tk), kRowThreads, 0, s>>>(
      dkv, pair_p, pair_ds, dout, q, pos, pos + tq, tq, tk, c, heads, kv_heads);
  check_launch("attention_block_backward");
}

void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t b, int64_t t, int64_t c, int64_t heads) {
  if (b * heads * t == 0) return;
  merge_kernel<<<row_blocks(b * heads * t), 32, 0, compute_stream()>>>(out, lse, block_out,
                                                                       block_lse, t, c, heads);
  check_launch("attention_merge");
}

void copy_columns(float* dst, int64_t dst_cols, int64_t dst_begin, const float* src,
                  int64_t src_cols, int64_t src_begin, int64_t width, int64_t rows, bool add) {
  const int64_t count = rows * width;
  if (count == 0) return;
  const int64_t blocks = (count + kCopyThreads - 1) / kCopyThreads;
  copy_columns_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kCopyThreads, 0,
                        compute_stream()>>>(dst, dst_cols, dst_begin, src, src_cols, src_begin,
                                            width, count, add);
  check_launch("copy_columns");
}

}  // namespace

void fill_ring_attention_kernels(CudaKernels& table) {
  table.attention_block_forward = attention_block_forward;
  table.attention_block_backward = attention_block_backward;
  table.attention_merge = attention_merge;
  table.copy_columns = copy_columns;
}

}  // namespace mgpu::cuda

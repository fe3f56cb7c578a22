// CUDA kernels for everything except GEMM and attention (see gemm_attention.cu), in the style of
// llm.c: one idea per kernel, plain indexing, comments on why. Each host wrapper has the signature
// of the matching CPU kernel in core/ops/cpu/kernels.h and queues its work on the calling rank's
// compute stream.
//
// The arithmetic is the CPU kernels' own: every per-element and per-row formula is a
// core/ops/math/ function (MGPU_HD) that both sides call, and this file is compiled without fused
// multiply-adds (core/CMakeLists.txt), so an element-wise result has the CPU's bits. What is
// GPU-only is the indexing and the shapes of parallelism:
//  - element-wise ops: one thread per element (grid-stride loop, so any size works);
//  - row-wise ops (layernorm, softmax, cross-entropy): one 256-thread block per row, threads
//    stride over the row's channels and meet in block_reduce: a row's sum is added in a tree
//    order, not the CPU's left-to-right one, the one source of difference beside expf/logf;
//  - column sums (bias and layernorm parameter gradients): one thread per column adds the rows in
//    ascending order into the gradient, as the CPU loop does: the same bits, and no atomics, so
//    a run gives the same result every time.
#include <cmath>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/token_groups.h"
#include "core/ops/math/elementwise.h"
#include "core/ops/math/optimizer.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

namespace {

constexpr int kThreads = 256;  // threads per block everywhere in this file

// Enough blocks for `count` threads, capped: the grid-stride loops cover the rest.
unsigned blocks_for(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

void check_launch(const char* op) {
  check(cudaGetLastError(), op);
}

// ---- reductions ---------------------------------------------------------------------------

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {  // the CPU's std::max_element keeps the larger value the same way
  __device__ float operator()(float a, float b) const { return math::larger(a, b); }
};

template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces one value per thread over the whole block; EVERY thread gets the result. blockDim.x
// must be a multiple of 32 (it is kThreads). Safe to call several times in a row.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  return warp_reduce(v, op);  // each warp reduces the partials itself: no third sync needed
}

// ---- element-wise -------------------------------------------------------------------------

#define GRID_STRIDE(i, count)                                                   \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void bias_add_kernel(float* out, const float* bias, int64_t n, int64_t c) {
  GRID_STRIDE(i, n * c) out[i] = math::accumulate(out[i], bias[i % c]);
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t count) {
  GRID_STRIDE(i, count) out[i] = math::accumulate(a[i], b[i]);
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, int64_t count) {
  GRID_STRIDE(i, count) y[i] = math::axpy_value(y[i], alpha, x[i]);
}

__global__ void scale_kernel(float* x, float alpha, int64_t count) {
  GRID_STRIDE(i, count) x[i] *= alpha;
}

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t count) {
  GRID_STRIDE(i, count) out[i] = math::gelu(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                     int64_t count) {
  GRID_STRIDE(i, count) dinp[i] = math::gelu_backward(inp[i], dout[i]);
}

// ---- column sums ----------------------------------------------------------------------------

// dbias[j] += dout[i, j] for i = 0, 1, ..., n-1: thread j walks its column down the rows.
__global__ void bias_grad_kernel(float* dbias, const float* dout, int64_t n, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float sum = dbias[j];
  for (int64_t i = 0; i < n; i++) sum = math::accumulate(sum, dout[i * c + j]);
  dbias[j] = sum;
}

// dweight[j] += dy[i,j] * xhat[i,j];  dbias[j] += dy[i,j], row after row as above.
__global__ void layernorm_param_grad_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int64_t n, int64_t c) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  float dw = dweight[j], db = dbias[j];
  for (int64_t i = 0; i < n; i++) {
    const float dy = dout[i * c + j];
    dw = math::accumulate(dw, dy * math::layernorm_xhat(inp[i * c + j], mean[i], rstd[i]));
    db = math::accumulate(db, dy);
  }
  dweight[j] = dw;
  dbias[j] = db;
}

unsigned column_blocks(int64_t c) {
  return static_cast<unsigned>((c + kThreads - 1) / kThreads);
}

// ---- row-wise: layernorm, softmax ------------------------------------------------------------

// One block per row: mean, then variance (two passes, as the CPU kernel), then normalize.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s = math::accumulate(s, x[j]);
  const float m = math::row_mean(block_reduce(s, Sum{}, 0.0f), c);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    v = math::accumulate(v, math::squared_deviation(x[j], m));
  const float r = math::layernorm_rstd(math::row_mean(block_reduce(v, Sum{}, 0.0f), c));
  float* y = out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = math::layernorm_out(x[j], m, r, weight[j], bias[j]);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w * dy, one block per row.
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp,
                                          const float* weight, const float* mean, const float* rstd,
                                          int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  const float* dy = dout + row * c;
  const float m = mean[row], r = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float g = math::layernorm_g(weight[j], dy[j]);
    g_sum = math::accumulate(g_sum, g);
    gx_sum = math::accumulate(gx_sum, g * math::layernorm_xhat(x[j], m, r));
  }
  const float g_mean = math::row_mean(block_reduce(g_sum, Sum{}, 0.0f), c);
  const float gx_mean = math::row_mean(block_reduce(gx_sum, Sum{}, 0.0f), c);
  float* dx = dinp + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = math::layernorm_xhat(x[j], m, r);
    dx[j] = math::layernorm_dx(math::layernorm_g(weight[j], dy[j]), xhat, g_mean, gx_mean, r);
  }
}

// Softmax of one row per block; `valid` entries take part, the rest (causal mask) become 0.
__device__ void softmax_row(float* y, const float* x, int64_t valid, int64_t c) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = math::larger(mx, x[j]);
  mx = block_reduce(mx, Max{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    s = math::accumulate(s, math::softmax_numerator(x[j], mx));
  const float inv = math::reciprocal(block_reduce(s, Sum{}, 0.0f));
  // Every thread has read what it needs (block_reduce synchronizes), so y may alias x.
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = j < valid ? math::softmax_numerator(x[j], mx) * inv : 0.0f;
}

// dx = y * (dy - sum(y * dy)) * scale over the first `valid` entries; 0 beyond. (softmax_backward
// passes scale 1: multiplying by 1 is exact, so that is the CPU's unscaled formula.)
__device__ void softmax_backward_row(float* dx, const float* y, const float* dy, int64_t valid,
                                     int64_t c, float scale) {
  float d = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) d = math::accumulate(d, y[j] * dy[j]);
  const float dot = block_reduce(d, Sum{}, 0.0f);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dx[j] = j < valid ? math::softmax_backward_scaled(y[j], dy[j], dot, scale) : 0.0f;
}

__global__ void softmax_forward_kernel(float* out, const float* inp, int64_t c) {
  softmax_row(out + blockIdx.x * c, inp + blockIdx.x * c, c, c);
}

__global__ void softmax_backward_kernel(float* dinp, const float* out, const float* dout,
                                        int64_t c) {
  const int64_t o = blockIdx.x * c;
  softmax_backward_row(dinp + o, out + o, dout + o, c, c, 1.0f);
}

// Attention rows: row r of [B*H*T, T] is query position r % t, which sees keys 0..r%t.
__global__ void causal_softmax_forward_kernel(float* att, int64_t t) {
  const int64_t row = blockIdx.x;
  softmax_row(att + row * t, att + row * t, row % t + 1, t);
}

__global__ void causal_softmax_backward_kernel(float* ds, const float* p, int64_t t, float scale) {
  const int64_t row = blockIdx.x;
  softmax_backward_row(ds + row * t, p + row * t, ds + row * t, row % t + 1, t, scale);
}

// ---- embedding ------------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int64_t t, int64_t c, int64_t count) {
  GRID_STRIDE(i, count) {
    int64_t row = i / c, j = i % c;  // row = b * t + position
    out[i] = math::embedding_value(wte[static_cast<int64_t>(tokens[row]) * c + j],
                                   wpe[(row % t) * c + j]);
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

// ---- cross-entropy --------------------------------------------------------------------------

// One block per row: loss_i = logsumexp(x) - x[target]; optionally dx = g * (softmax - onehot).
// dlogits may alias logits: every read of x happens before the block_reduce barriers that come
// before the first write, and each thread rewrites only the entries it reads afterwards. The sum
// of exps is the CPU's: vexp terms when training, libm's expf for the loss alone.
__global__ void cross_entropy_kernel(float* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, int64_t v, float g) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  const int32_t target = targets[row];
  const float x_target = x[target];
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = math::larger(mx, x[j]);
  mx = block_reduce(mx, Max{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    s = math::accumulate(s,
                         dlogits ? math::ce_exp_term(x[j], mx) : math::softmax_numerator(x[j], mx));
  const float log_sum = logf(block_reduce(s, Sum{}, 0.0f));
  if (threadIdx.x == 0) losses[row] = math::ce_row_loss(log_sum, mx, x_target);
  if (!dlogits) return;
  float* dx = dlogits + row * v;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    dx[j] = math::ce_dlogit(x[j], mx, log_sum, j == target, g);
}

// Vocabulary-parallel cross-entropy (ops::vocab_parallel_ce_*), one block per row. Local half:
// the row's max, its sum of exps below it, the target's logit where this rank owns it.
__global__ void vocab_parallel_ce_stats_kernel(float* stats, const float* logits,
                                               const int32_t* targets, int64_t n, int64_t v,
                                               int64_t v0) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = math::larger(mx, x[j]);
  mx = block_reduce(mx, Max{}, -INFINITY);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    s = math::accumulate(s, math::ce_exp_term(x[j], mx));
  s = block_reduce(s, Sum{}, 0.0f);
  if (threadIdx.x != 0) return;
  stats[row] = mx;
  stats[n + row] = s;
  stats[2 * n + row] = math::local_target_logit(x, targets[row], v0, v);
}

// Global half: the row's log-sum-exp from every rank's stats (the CPU's loop over the ranks, run
// by every thread: `parts` is small), the row's loss, dx = g (softmax - onehot).
__global__ void vocab_parallel_ce_kernel(float* dlogits, float* losses, const float* logits,
                                         const float* all_stats, const int32_t* targets, int64_t n,
                                         int64_t v, int64_t v0, int64_t parts, float g) {
  const int64_t row = blockIdx.x;
  const math::RowLse lse = math::vocab_parallel_row_lse(all_stats, n, row, parts);
  if (threadIdx.x == 0) losses[row] = math::vocab_parallel_row_loss(lse);
  const float* x = logits + row * v;
  float* dx = dlogits + row * v;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    dx[j] =
        math::vocab_parallel_dlogit(x[j], lse.lse, math::is_local_target(j, targets[row], v0), g);
}

// Sums n per-row losses in double (as the CPU does) with one block.
__global__ void sum_losses_kernel(double* total, const float* losses, int64_t n) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = partial[0];
}

// ---- optimizers -----------------------------------------------------------------------------

__global__ void sgd_momentum_kernel(float* p, const float* g, float* buf, int64_t n, float lr,
                                    float momentum, float weight_decay) {
  GRID_STRIDE(i, n) {
    math::sgd_momentum_element(&p[i], g[i], buf ? &buf[i] : nullptr, lr, momentum, weight_decay);
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float decay, double bias1,
                             double bias2) {
  GRID_STRIDE(i, n) {
    math::adamw_element(&p[i], g[i], &m[i], &v[i], lr, beta1, beta2, eps, decay, bias1, bias2);
  }
}

__global__ void fill_kernel(float* x, float value, int64_t count) {
  GRID_STRIDE(i, count) x[i] = value;
}

__global__ void empty_kernel() {}

// ---- host wrappers (the CudaKernels signatures) ----------------------------------------------

void bias_add(float* out, const float* bias, int64_t n, int64_t c) {
  if (n * c == 0) return;
  bias_add_kernel<<<blocks_for(n * c), kThreads, 0, compute_stream()>>>(out, bias, n, c);
  check_launch("bias_add");
}

void bias_grad(float* dbias, const float* dout, int64_t n, int64_t c) {
  if (n * c == 0) return;
  bias_grad_kernel<<<column_blocks(c), kThreads, 0, compute_stream()>>>(dbias, dout, n, c);
  check_launch("bias_grad");
}

void add(float* out, const float* a, const float* b, int64_t count) {
  if (count == 0) return;
  add_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(out, a, b, count);
  check_launch("add");
}

void axpy(float* y, float alpha, const float* x, int64_t count) {
  if (count == 0) return;
  axpy_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(y, alpha, x, count);
  check_launch("axpy");
}

void scale(float* x, float alpha, int64_t count) {
  if (count == 0) return;
  scale_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(x, alpha, count);
  check_launch("scale");
}

void gelu_forward(float* out, const float* inp, int64_t count) {
  if (count == 0) return;
  gelu_forward_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(out, inp, count);
  check_launch("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t count) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(dinp, inp, dout,
                                                                             count);
  check_launch("gelu_backward");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t n, int64_t c) {
  if (n == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(
      out, mean, rstd, inp, weight, bias, c);
  check_launch("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t n, int64_t c) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  // Parameter gradients first: they only read dout, which stays valid even if dinp aliases it.
  layernorm_param_grad_kernel<<<column_blocks(c), kThreads, 0, s>>>(dweight, dbias, dout, inp, mean,
                                                                    rstd, n, c);
  layernorm_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(dinp, dout, inp, weight,
                                                                          mean, rstd, c);
  check_launch("layernorm_backward");
}

void softmax_forward(float* out, const float* inp, int64_t n, int64_t c) {
  if (n == 0) return;
  softmax_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(out, inp, c);
  check_launch("softmax_forward");
}

void softmax_backward(float* dinp, const float* out, const float* dout, int64_t n, int64_t c) {
  if (n == 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, compute_stream()>>>(dinp, out,
                                                                                       dout, c);
  check_launch("softmax_backward");
}

// Token ids arrive in host memory (ops.h's contract): copy them to a device scratch buffer first.
// From pageable memory cudaMemcpyAsync returns only once the host data has been read, so the
// caller may reuse its buffer right away.
const int32_t* tokens_to_device(const int32_t* host, int64_t count, int slot) {
  auto* dev = static_cast<int32_t*>(scratch(slot, static_cast<size_t>(count) * sizeof(int32_t)));
  check(cudaMemcpyAsync(dev, host, static_cast<size_t>(count) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, compute_stream()),
        "cudaMemcpyAsync(tokens)");
  return dev;
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c) {
  const int64_t count = b * t * c;
  if (count == 0) return;
  const int32_t* dev_tokens = tokens_to_device(tokens, b * t, kScratchTokens);
  embedding_forward_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(
      out, dev_tokens, wte, wpe, t, c, count);
  check_launch("embedding_forward");
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

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c) {
  if (b * t * c == 0) return;
  const TokenGroups g = token_groups_to_device(tokens, b * t);
  cudaStream_t s = compute_stream();
  embedding_backward_wte_kernel<<<blocks_for(g.groups * c), kThreads, 0, s>>>(
      dwte, dout, g.rows, g.group_token, g.start, g.groups, c);
  embedding_backward_wpe_kernel<<<blocks_for(t * c), kThreads, 0, s>>>(dwpe, dout, b, t, c);
  check_launch("embedding_backward");
}

// The cross-entropies' row losses: n floats in the reduce scratch, then their double total
// (8-byte aligned after them).
struct RowLosses {
  float* losses;
  double* total;
};
RowLosses row_loss_scratch(int64_t n) {
  const size_t loss_bytes = (static_cast<size_t>(n) * sizeof(float) + 7) / 8 * 8;
  char* buf = static_cast<char*>(scratch(kScratchReduce, loss_bytes + sizeof(double)));
  return {reinterpret_cast<float*>(buf), reinterpret_cast<double*>(buf + loss_bytes)};
}

// The mean of the n row losses: summed on the device in double, only the one scalar copied back
// (the host needs the loss value, so this call waits).
float mean_row_loss(const RowLosses& r, int64_t n, cudaStream_t s, const char* op) {
  sum_losses_kernel<<<1, kThreads, 0, s>>>(r.total, r.losses, n);
  check_launch(op);
  double host_total = 0;
  check(cudaMemcpyAsync(&host_total, r.total, sizeof(double), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync(loss)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize(loss)");
  return math::mean_loss(host_total, n);
}

// Shared by both cross-entropy entries: per-row losses on the device, then their mean.
float cross_entropy(float* dlogits, const float* logits, const int32_t* targets, int64_t n,
                    int64_t v, float grad_scale) {
  if (n == 0) return 0.0f;
  cudaStream_t s = compute_stream();
  const int32_t* dev_targets = tokens_to_device(targets, n, kScratchTargets);
  const RowLosses r = row_loss_scratch(n);
  const float g = math::ce_grad_scale(grad_scale, n);
  cross_entropy_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(dlogits, r.losses, logits,
                                                                     dev_targets, v, g);
  return mean_row_loss(r, n, s, "cross_entropy");
}

void vocab_parallel_ce_stats(float* stats, const float* logits, const int32_t* targets, int64_t n,
                             int64_t v, int64_t v0) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  const int32_t* dev_targets = tokens_to_device(targets, n, kScratchTargets);
  vocab_parallel_ce_stats_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(
      stats, logits, dev_targets, n, v, v0);
  check_launch("vocab_parallel_ce_stats");
}

float vocab_parallel_ce_forward_backward(float* dlogits, const float* logits,
                                         const float* all_stats, const int32_t* targets, int64_t n,
                                         int64_t v, int64_t v0, int64_t parts, float grad_scale) {
  if (n == 0) return 0.0f;
  cudaStream_t s = compute_stream();
  const int32_t* dev_targets = tokens_to_device(targets, n, kScratchTargets);
  const RowLosses r = row_loss_scratch(n);
  const float g = math::ce_grad_scale(grad_scale, n);
  vocab_parallel_ce_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(
      dlogits, r.losses, logits, all_stats, dev_targets, n, v, v0, parts, g);
  return mean_row_loss(r, n, s, "vocab_parallel_ce");
}

float cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets,
                                     int64_t n, int64_t v, float grad_scale) {
  return cross_entropy(dlogits, logits, targets, n, v, grad_scale);
}

float cross_entropy_loss(const float* logits, const int32_t* targets, int64_t n, int64_t v) {
  return cross_entropy(nullptr, logits, targets, n, v, 1.0f);
}

void sgd_momentum(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                  float momentum, float weight_decay) {
  if (n == 0) return;
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(
      param, grad, momentum != 0.0f ? momentum_buf : nullptr, n, lr, momentum, weight_decay);
  check_launch("sgd_momentum");
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, double bias1, double bias2) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(
      param, grad, m, v, n, lr, beta1, beta2, eps, math::adamw_decay(lr, weight_decay), bias1,
      bias2);
  check_launch("adamw");
}

void fill(float* x, float value, int64_t count) {
  if (count == 0) return;
  fill_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(x, value, count);
  check_launch("fill");
}

}  // namespace

void causal_softmax_forward(float* att, int64_t rows, int64_t t) {
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, compute_stream()>>>(att,
                                                                                                t);
  check_launch("causal_softmax_forward");
}

void causal_softmax_backward(float* ds, const float* p, int64_t rows, int64_t t, float scale) {
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, compute_stream()>>>(
      ds, p, t, scale);
  check_launch("causal_softmax_backward");
}

void launch_empty_kernel() {
  empty_kernel<<<1, 1, 0, compute_stream()>>>();
  check_launch("empty_kernel");
}

void fill_elementwise_kernels(CudaKernels& k) {
  k.bias_add = bias_add;
  k.bias_grad = bias_grad;
  k.add = add;
  k.axpy = axpy;
  k.scale = scale;
  k.gelu_forward = gelu_forward;
  k.gelu_backward = gelu_backward;
  k.layernorm_forward = layernorm_forward;
  k.layernorm_backward = layernorm_backward;
  k.softmax_forward = softmax_forward;
  k.softmax_backward = softmax_backward;
  k.embedding_forward = embedding_forward;
  k.embedding_backward = embedding_backward;
  k.cross_entropy_forward_backward = cross_entropy_forward_backward;
  k.cross_entropy_loss = cross_entropy_loss;
  k.vocab_parallel_ce_stats = vocab_parallel_ce_stats;
  k.vocab_parallel_ce_forward_backward = vocab_parallel_ce_forward_backward;
  k.sgd_momentum = sgd_momentum;
  k.adamw = adamw;
  k.fill = fill;
}

}  // namespace mgpu::cuda

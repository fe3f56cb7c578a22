// CUDA kernels for everything except GEMM and attention (see gemm_attention.cu), in the style of
// llm.c: one idea per kernel, plain indexing, comments on why. Each host wrapper has the signature
// of the matching CPU kernel in core/ops/cpu/kernels.h and queues its work on the calling rank's
// compute stream; the math is the CPU reference's, so results agree to float rounding.
//
// Shapes of parallelism used here:
//  - element-wise ops: one thread per element (grid-stride loop, so any size works);
//  - row-wise ops (layernorm, softmax, cross-entropy): one 256-thread block per row, threads
//    stride over the row's channels and meet in block_reduce;
//  - column sums (bias and layernorm parameter gradients): one thread per column per chunk of
//    rows, partial sums added with atomicAdd (the order of float additions is not fixed, so
//    these differ from the CPU by rounding only).
#include <cfloat>
#include <cmath>

#include "core/ops/cuda/cuda_kernels.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

namespace {

constexpr int kThreads = 256;          // threads per block everywhere in this file
constexpr int64_t kRowsPerChunk = 64;  // rows per block in the column-sum kernels

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
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
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
  GRID_STRIDE(i, n * c) out[i] += bias[i % c];
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t count) {
  GRID_STRIDE(i, count) out[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, int64_t count) {
  GRID_STRIDE(i, count) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float* x, float alpha, int64_t count) {
  GRID_STRIDE(i, count) x[i] *= alpha;
}

// GELU, tanh approximation, with tanh written as the CPU reference writes it (1 - 2/(e^2u + 1)).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;
__device__ float gelu_tanh(float u) {
  return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t count) {
  GRID_STRIDE(i, count) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + gelu_tanh(u));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                     int64_t count) {
  GRID_STRIDE(i, count) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    float th = gelu_tanh(u);
    float sech2 = 1.0f - th * th;
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx) * dout[i];
  }
}

// ---- column sums ----------------------------------------------------------------------------

// dbias[j] += sum over rows of dout[:, j]. Block (x, y) sums columns x*256.. over rows chunk y.
__global__ void bias_grad_kernel(float* dbias, const float* dout, int64_t n, int64_t c) {
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  int64_t begin = blockIdx.y * kRowsPerChunk, end = min(begin + kRowsPerChunk, n);
  float sum = 0.0f;
  for (int64_t i = begin; i < end; i++) sum += dout[i * c + j];
  atomicAdd(&dbias[j], sum);
}

// dweight[j] += sum_i dy[i,j] * xhat[i,j];  dbias[j] += sum_i dy[i,j].
__global__ void layernorm_param_grad_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int64_t n, int64_t c) {
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= c) return;
  int64_t begin = blockIdx.y * kRowsPerChunk, end = min(begin + kRowsPerChunk, n);
  float dw = 0.0f, db = 0.0f;
  for (int64_t i = begin; i < end; i++) {
    float dy = dout[i * c + j];
    dw += dy * (inp[i * c + j] - mean[i]) * rstd[i];
    db += dy;
  }
  atomicAdd(&dweight[j], dw);
  atomicAdd(&dbias[j], db);
}

dim3 column_grid(int64_t n, int64_t c) {
  return dim3(static_cast<unsigned>((c + kThreads - 1) / kThreads),
              static_cast<unsigned>((n + kRowsPerChunk - 1) / kRowsPerChunk));
}

// ---- row-wise: layernorm, softmax ------------------------------------------------------------

// One block per row: mean, then variance (two passes, as the CPU reference), then normalize.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * c;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += x[j];
  const float m = block_reduce(s, Sum{}, 0.0f) / static_cast<float>(c);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) v += (x[j] - m) * (x[j] - m);
  const float var = block_reduce(v, Sum{}, 0.0f) / static_cast<float>(c);
  const float r = 1.0f / sqrtf(var + 1e-5f);
  float* y = out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) y[j] = (x[j] - m) * r * weight[j] + bias[j];
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
    float g = weight[j] * dy[j];
    g_sum += g;
    gx_sum += g * (x[j] - m) * r;
  }
  const float g_mean = block_reduce(g_sum, Sum{}, 0.0f) / static_cast<float>(c);
  const float gx_mean = block_reduce(gx_sum, Sum{}, 0.0f) / static_cast<float>(c);
  float* dx = dinp + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float xhat = (x[j] - m) * r;
    dx[j] = r * (weight[j] * dy[j] - g_mean - xhat * gx_mean);
  }
}

// Softmax of one row per block; `valid` entries take part, the rest (causal mask) become 0.
__device__ void softmax_row(float* y, const float* x, int64_t valid, int64_t c) {
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_reduce(mx, Max{}, -FLT_MAX);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) s += expf(x[j] - mx);
  const float inv = 1.0f / block_reduce(s, Sum{}, 0.0f);
  // Every thread has read what it needs (block_reduce synchronizes), so y may alias x.
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    y[j] = j < valid ? expf(x[j] - mx) * inv : 0.0f;
}

// dx = y * (dy - sum(y * dy)) * scale over the first `valid` entries; 0 beyond.
__device__ void softmax_backward_row(float* dx, const float* y, const float* dy, int64_t valid,
                                     int64_t c, float scale) {
  float d = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) d += y[j] * dy[j];
  const float dot = block_reduce(d, Sum{}, 0.0f);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dx[j] = j < valid ? y[j] * (dy[j] - dot) * scale : 0.0f;
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
    out[i] = wte[static_cast<int64_t>(tokens[row]) * c + j] + wpe[(row % t) * c + j];
  }
}

// Scatter-add: a token id that appears several times gets several atomicAdds.
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout,
                                          const int32_t* tokens, int64_t t, int64_t c,
                                          int64_t count) {
  GRID_STRIDE(i, count) {
    int64_t row = i / c, j = i % c;
    atomicAdd(&dwte[static_cast<int64_t>(tokens[row]) * c + j], dout[i]);
    atomicAdd(&dwpe[(row % t) * c + j], dout[i]);
  }
}

// ---- cross-entropy --------------------------------------------------------------------------

// One block per row: loss_i = logsumexp(x) - x[target]; optionally dx = g * (softmax - onehot).
// dlogits may alias logits: every read of x happens before the block_reduce barriers that come
// before the first write, and each thread rewrites only the entries it reads afterwards.
__global__ void cross_entropy_kernel(float* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, int64_t v, float g) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  const int32_t target = targets[row];
  const float x_target = x[target];
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_reduce(mx, Max{}, -FLT_MAX);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(x[j] - mx);
  const float log_sum = logf(block_reduce(s, Sum{}, 0.0f));
  if (threadIdx.x == 0) losses[row] = log_sum + mx - x_target;
  if (!dlogits) return;
  float* dx = dlogits + row * v;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float p = expf(x[j] - mx - log_sum);
    dx[j] = g * (p - (j == target ? 1.0f : 0.0f));
  }
}

// Vocabulary-parallel cross-entropy (ops::vocab_parallel_ce_*), one block per row. Local half:
// the row's max, its sum of exps below it, the target's logit where this rank owns it.
__global__ void vocab_parallel_ce_stats_kernel(float* stats, const float* logits,
                                               const int32_t* targets, int64_t n, int64_t v,
                                               int64_t v0) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * v;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_reduce(mx, Max{}, -FLT_MAX);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(x[j] - mx);
  s = block_reduce(s, Sum{}, 0.0f);
  if (threadIdx.x != 0) return;
  const int64_t local_target = targets[row] - v0;
  stats[row] = mx;
  stats[n + row] = s;
  stats[2 * n + row] = local_target >= 0 && local_target < v ? x[local_target] : 0.0f;
}

// Global half: the log-sum-exp from every rank's stats, the row's loss, dx = g (softmax - onehot).
__global__ void vocab_parallel_ce_kernel(float* dlogits, float* losses, const float* logits,
                                         const float* all_stats, const int32_t* targets, int64_t n,
                                         int64_t v, int64_t v0, int64_t parts, float g) {
  const int64_t row = blockIdx.x;
  float mx = all_stats[row], target_logit = 0.0f, sum = 0.0f;
  for (int64_t r = 0; r < parts; r++) mx = fmaxf(mx, all_stats[r * 3 * n + row]);
  for (int64_t r = 0; r < parts; r++) {
    const float* st = all_stats + r * 3 * n;
    sum += st[n + row] * expf(st[row] - mx);
    target_logit += st[2 * n + row];
  }
  const float lse = mx + logf(sum);
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
  const float* x = logits + row * v;
  float* dx = dlogits + row * v;
  const int64_t local_target = targets[row] - v0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    dx[j] = g * (expf(x[j] - lse) - (j == local_target ? 1.0f : 0.0f));
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
    float d = g[i] + weight_decay * p[i];
    if (buf) {
      buf[i] = momentum * buf[i] + d;
      d = buf[i];
    }
    p[i] -= lr * d;
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float decay, double bias1,
                             double bias2) {
  GRID_STRIDE(i, n) {
    float pi = p[i] * decay;  // decoupled weight decay
    float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
    float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float m_hat = static_cast<float>(mi / bias1);
    float v_hat = static_cast<float>(vi / bias2);
    p[i] = pi - lr * m_hat / (sqrtf(v_hat) + eps);
    m[i] = mi;
    v[i] = vi;
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
  bias_grad_kernel<<<column_grid(n, c), kThreads, 0, compute_stream()>>>(dbias, dout, n, c);
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
  layernorm_param_grad_kernel<<<column_grid(n, c), kThreads, 0, s>>>(dweight, dbias, dout, inp,
                                                                     mean, rstd, n, c);
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

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c) {
  const int64_t count = b * t * c;
  if (count == 0) return;
  const int32_t* dev_tokens = tokens_to_device(tokens, b * t, kScratchTokens);
  embedding_backward_kernel<<<blocks_for(count), kThreads, 0, compute_stream()>>>(
      dwte, dwpe, dout, dev_tokens, t, c, count);
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
  return static_cast<float>(host_total / static_cast<double>(n));
}

// Shared by both cross-entropy entries: per-row losses on the device, then their mean.
float cross_entropy(float* dlogits, const float* logits, const int32_t* targets, int64_t n,
                    int64_t v, float grad_scale) {
  if (n == 0) return 0.0f;
  cudaStream_t s = compute_stream();
  const int32_t* dev_targets = tokens_to_device(targets, n, kScratchTargets);
  const RowLosses r = row_loss_scratch(n);
  const float g = grad_scale / static_cast<float>(n);
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
  const float g = grad_scale / static_cast<float>(n);
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
      param, grad, m, v, n, lr, beta1, beta2, eps, 1.0f - lr * weight_decay, bias1, bias2);
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

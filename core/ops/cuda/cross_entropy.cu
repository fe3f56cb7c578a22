// The CUDA cross-entropies, whole-vocabulary and vocabulary-parallel: one block per row, then
// the row losses summed on the device in double and only the mean copied back.
#include <cmath>

#include "core/ops/math/elementwise.h"

#include "core/ops/cuda/cuda_kernels.h"
#include "core/ops/cuda/kernels_internal.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::cuda {

using detail::block_reduce;
using detail::check_launch;
using detail::kThreads;
using detail::Max;
using detail::Sum;
using detail::tokens_to_device;

namespace {

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

}  // namespace

namespace detail {

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

}  // namespace detail

}  // namespace mgpu::cuda

// The CPU cross-entropies: over the whole vocabulary, and vocabulary-parallel (each rank's stats,
// then the loss and gradient from every rank's). Same build flags as kernels.cpp, same math::.
#include "core/ops/cpu/kernels.h"

#include "core/ops/cpu/vectorize.h"
#include "core/ops/math/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mgpu::cpu {

// loss_i = logsumexp(logits_i) - logits_i[target]; d loss_i / d logits_i = softmax - onehot.
MGPU_VECTOR_CLONES float cross_entropy_forward_backward(float* dlogits, const float* logits,
                                                        const int32_t* targets, int64_t n,
                                                        int64_t v, float grad_scale) {
  double total = 0.0;
  const float g = math::ce_grad_scale(grad_scale, n);  // the mean over tokens
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    float* dx = dlogits + i * v;
    const float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum = math::accumulate(sum, math::ce_exp_term(x[j], mx));
    const float log_sum = logf(sum);
    const int32_t target = targets[i];
    total += static_cast<double>(math::ce_row_loss(log_sum, mx, x[target]));  // before dx: aliasing
    for (int64_t j = 0; j < v; j++) dx[j] = math::ce_dlogit(x[j], mx, log_sum, j == target, g);
  }
  return math::mean_loss(total, n);
}

MGPU_VECTOR_CLONES float cross_entropy_loss(const float* logits, const int32_t* targets, int64_t n,
                                            int64_t v) {
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    const float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum = math::accumulate(sum, math::softmax_numerator(x[j], mx));
    total += static_cast<double>(math::ce_row_loss(logf(sum), mx, x[targets[i]]));
  }
  return math::mean_loss(total, n);
}

// Vocabulary-parallel cross-entropy, local half: per row the max, the sum of exps below it, and
// the target's logit where it falls in [v0, v0 + v).
MGPU_VECTOR_CLONES void vocab_parallel_ce_stats(float* stats, const float* logits,
                                                const int32_t* targets, int64_t n, int64_t v,
                                                int64_t v0) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    const float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum = math::accumulate(sum, math::ce_exp_term(x[j], mx));
    stats[i] = mx;
    stats[n + i] = sum;
    stats[2 * n + i] = math::local_target_logit(x, targets[i], v0, v);
  }
}

// Global half: the row's lse from every rank's stats (math::vocab_parallel_row_lse); the loss is
// lse minus the target's logit (owned by one rank, the others sent 0); dx = g (exp(x - lse) -
// onehot).
MGPU_VECTOR_CLONES float vocab_parallel_ce_forward_backward(float* dlogits, const float* logits,
                                                            const float* all_stats,
                                                            const int32_t* targets, int64_t n,
                                                            int64_t v, int64_t v0, int64_t parts,
                                                            float grad_scale) {
  double total = 0.0;
  const float g = math::ce_grad_scale(grad_scale, n);
  for (int64_t i = 0; i < n; i++) {
    const math::RowLse row = math::vocab_parallel_row_lse(all_stats, n, i, parts);
    total += static_cast<double>(math::vocab_parallel_row_loss(row));
    const float* x = logits + i * v;
    float* dx = dlogits + i * v;
    for (int64_t j = 0; j < v; j++)
      dx[j] =
          math::vocab_parallel_dlogit(x[j], row.lse, math::is_local_target(j, targets[i], v0), g);
  }
  return math::mean_loss(total, n);
}

}  // namespace mgpu::cpu

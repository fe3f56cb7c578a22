// The per-element and per-row arithmetic of the model's kernels, written once for the CPU kernels
// (core/ops/cpu/) and the CUDA kernels (core/ops/cuda/): GELU, layernorm, softmax, cross-entropy
// (whole-row and the vocabulary-parallel halves), embedding and bias. Each function fixes the
// order of its float operations, and neither side fuses a multiply-add (the CPU kernels build
// with -ffp-contract=off, the CUDA ones with -fmad=false: core/CMakeLists.txt), so an element
// computed here has the same bits on either side. What stays side-specific: indexing, and the
// ORDER in which a reduction adds a row (a loop on the CPU, a block of threads on the GPU), which
// is why the row sums are passed in, not computed here.
//
// expf/logf are the one place the two sides call different code: the host's libm and CUDA's
// (within 2 ulp of the exact value). Where the CPU kernels use the polynomial vexp instead, so does
// the GPU.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/cast.h"
#include "core/ops/math/hd.h"

namespace mgpu::math {

// ---- e^x ------------------------------------------------------------------

// e^x in a form the CPU compiler can vectorise (libm's expf is a call per element, the hot part
// of GELU and the cross-entropy): x = k ln2 + r with k = round(x / ln2) and |r| <= ln2/2 (ln2
// split in two constants so r keeps its low bits), e^r by the degree-7 Taylor-like polynomial of
// Cephes' expf (relative error ~1e-7, about one ulp), times 2^k made from k's exponent bits.
// x is clamped to [-87, 88], where 2^k stays a normal float: below, e^x is ~1e-38 instead of 0.
MGPU_HD float vexp(float x) {
  x = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);       // NaN stays NaN
  const float round_shift = 12582912.0f;                   // 1.5 * 2^23: adding it rounds
  const float z = x * 1.44269504088896341f + round_shift;  // round(x / ln2) in the low bits
  const float k = z - round_shift;
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;  // x - k ln2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // k's integer sits in z's low mantissa bits; unsigned arithmetic: no overflow, even for NaN.
  const uint32_t exponent = (float_bits(z) - float_bits(round_shift) + 127u) << 23;
  return p * bits_float(exponent);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): saturates correctly to +-1.
MGPU_HD float fast_tanh(float u) {
  return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f);
}

// ---- GELU, tanh approximation (as in GPT-2; Hendrycks & Gimpel 2016) --------------------------
// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

MGPU_HD float gelu_tanh_argument(float x) {
  return kGeluScale * (x + kGeluCube * x * x * x);
}

MGPU_HD float gelu(float x) {
  return 0.5f * x * (1.0f + fast_tanh(gelu_tanh_argument(x)));
}

// d gelu / dx times dy: 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx.
MGPU_HD float gelu_backward(float x, float dy) {
  const float th = fast_tanh(gelu_tanh_argument(x));
  const float sech2 = 1.0f - th * th;  // d tanh(u) / du
  const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
  const float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
  return local * dy;
}

// ---- reductions' pieces ----------------------------------------------------------------------

// The larger of two values, as std::max(a, b) picks it (a when neither is larger).
MGPU_HD float larger(float a, float b) {
  return a < b ? b : a;
}

// The mean of a row from its sum (a float division by the row length, as both sides do).
MGPU_HD float row_mean(float sum, int64_t c) {
  return sum / static_cast<float>(c);
}

// ---- layernorm (Ba et al. 2016) over the last dim: y = (x - mean) * rstd * w + b ---------------

constexpr float kLayernormEps = 1e-5f;

// One summand of the variance (the second pass, around the mean of the first).
MGPU_HD float squared_deviation(float x, float mean) {
  return (x - mean) * (x - mean);
}

MGPU_HD float layernorm_rstd(float variance) {
  return 1.0f / sqrtf(variance + kLayernormEps);
}

MGPU_HD float layernorm_xhat(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}

MGPU_HD float layernorm_out(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}

// With xhat = (x - mean) * rstd and g = w * dy:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += dy * xhat,  db += dy.
MGPU_HD float layernorm_g(float w, float dy) {
  return w * dy;
}

MGPU_HD float layernorm_dx(float g, float xhat, float g_mean, float g_xhat_mean, float rstd) {
  return rstd * (g - g_mean - xhat * g_xhat_mean);
}

// ---- softmax over the last dim ------------------------------------------------------------
// p_j = exp(x_j - max) / sum_k exp(x_k - max): subtracting the max keeps exp from overflowing.

MGPU_HD float softmax_numerator(float x, float max) {
  return expf(x - max);
}

MGPU_HD float reciprocal(float sum) {
  return 1.0f / sum;
}

// dx_j = y_j (dy_j - sum_k y_k dy_k) (times the attention's 1/sqrt(hs) where it has one).
MGPU_HD float softmax_backward(float y, float dy, float dot) {
  return y * (dy - dot);
}

MGPU_HD float softmax_backward_scaled(float y, float dy, float dot, float scale) {
  return y * (dy - dot) * scale;
}

// ---- cross-entropy: loss_i = logsumexp(x_i) - x_i[target]; dloss/dx = softmax - onehot ---------

// One summand of the row's sum of exps in the training kernel (with gradient) and the
// vocabulary-parallel stats. The loss-only kernel sums softmax_numerator (libm's expf) instead:
// the CPU kernels always did, and their results must not move.
MGPU_HD float ce_exp_term(float x, float max) {
  return vexp(x - max);
}

MGPU_HD float ce_row_loss(float log_sum, float max, float target_logit) {
  return log_sum + max - target_logit;
}

// The scale of every dlogit: the caller's grad_scale over the n rows of the mean.
MGPU_HD float ce_grad_scale(float grad_scale, int64_t n) {
  return grad_scale / static_cast<float>(n);
}

// g * (p - onehot) with p = exp(x - lse), lse = max + log_sum.
MGPU_HD float ce_dlogit(float x, float max, float log_sum, bool is_target, float g) {
  const float p = vexp(x - max - log_sum);
  return g * (p - (is_target ? 1.0f : 0.0f));
}

// The mean of the n row losses, summed in double (a sum over many tokens).
MGPU_HD float mean_loss(double total, int64_t n) {
  return static_cast<float>(total / static_cast<double>(n));
}

// Vocabulary-parallel cross-entropy (Megatron-LM): the logits [n, v] of a rank are the columns
// [v0, v0 + v) of the vocabulary. Local half: per row its max, the sum of exps below it and the
// target's logit where this rank owns the target (0 elsewhere), stored as stats [3, n].
MGPU_HD float local_target_logit(const float* row, int32_t target, int64_t v0, int64_t v) {
  const int64_t local = target - v0;
  return local >= 0 && local < v ? row[local] : 0.0f;
}

MGPU_HD bool is_local_target(int64_t j, int32_t target, int64_t v0) {
  return j == target - v0;
}

// Global half, one row from every rank's stats all_stats [parts, 3, n]: with M the largest max,
// lse = M + log(sum_r s_r exp(m_r - M)); the target logit is the one rank's that owns it.
struct RowLse {
  float lse;
  float target_logit;
};

MGPU_HD RowLse vocab_parallel_row_lse(const float* all_stats, int64_t n, int64_t i, int64_t parts) {
  float max = all_stats[i], target_logit = 0.0f, sum = 0.0f;
  for (int64_t r = 0; r < parts; r++) max = larger(max, all_stats[r * 3 * n + i]);
  for (int64_t r = 0; r < parts; r++) {
    const float* stats = all_stats + r * 3 * n;
    sum += stats[n + i] * vexp(stats[i] - max);
    target_logit += stats[2 * n + i];
  }
  return {max + logf(sum), target_logit};
}

MGPU_HD float vocab_parallel_row_loss(const RowLse& row) {
  return row.lse - row.target_logit;
}

// g * (exp(x - lse) - onehot), the target one-hot only on the rank that owns it.
MGPU_HD float vocab_parallel_dlogit(float x, float lse, bool is_target, float g) {
  return g * (vexp(x - lse) - (is_target ? 1.0f : 0.0f));
}

// ---- embedding and bias -------------------------------------------------------------------

// out[b, t] = wte[token] + wpe[t]; backward adds dout into both rows (a scatter-add over tokens).
MGPU_HD float embedding_value(float token_row, float position_row) {
  return token_row + position_row;
}

// An accumulating sum: bias_add (out += bias), bias_grad and every parameter gradient (+= dout).
MGPU_HD float accumulate(float sum, float term) {
  return sum + term;
}

// y + alpha * x (axpy).
MGPU_HD float axpy_value(float y, float alpha, float x) {
  return y + alpha * x;
}

}  // namespace mgpu::math

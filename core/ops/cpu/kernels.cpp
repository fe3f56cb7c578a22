// Readable CPU kernels (llm.c style): loops over rows with contiguous inner loops, no allocation
// per element. GEMMs go to OpenBLAS; everything else is a few lines of arithmetic.
#include "core/ops/cpu/kernels.h"

#include "core/ops/cpu/vectorize.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" void openblas_set_num_threads(int);
// OpenBLAS's pthread builds export this (their fork handler uses it); weak, so that a build of
// OpenBLAS without a pool links too.
extern "C" __attribute__((weak)) int blas_thread_shutdown_(void);

namespace mgpu::cpu {

void use_one_blas_thread() {
  static const bool done = [] {
    // OpenBLAS (pthreads) starts nproc - 1 workers when it is loaded; each one polls for work
    // with sched_yield for about 2^28 cycles before it sleeps. On a 2-core machine that is a
    // third busy thread beside two ranks for the first ~0.1 s of every run: the first steps and
    // collectives lose a core to it (bench_allreduce: 1K-element all-reduces 2-3x slower). The
    // ranks never use the pool, so join it. The order matters: openblas_set_num_threads
    // restarts a pool that is down.
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
    return true;
  }();
  (void)done;
}

void matmul(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a,
            bool trans_b, float beta) {
  use_one_blas_thread();
  // Row-major leading dimensions: a stored [m,k] (or [k,m] when transposed), b [k,n] (or [n,k]).
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(n));
}

MGPU_VECTOR_CLONES void bias_add(float* out, const float* bias, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    float* row = out + i * c;
    for (int64_t j = 0; j < c; j++) row[j] += bias[j];
  }
}

MGPU_VECTOR_CLONES void bias_grad(float* dbias, const float* dout, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* row = dout + i * c;
    for (int64_t j = 0; j < c; j++) dbias[j] += row[j];
  }
}

MGPU_VECTOR_CLONES void add(float* out, const float* a, const float* b, int64_t count) {
  for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

MGPU_VECTOR_CLONES void axpy(float* y, float alpha, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; i++) y[i] += alpha * x[i];
}

MGPU_VECTOR_CLONES void scale(float* x, float alpha, int64_t count) {
  for (int64_t i = 0; i < count; i++) x[i] *= alpha;
}

// GELU, tanh approximation (as in GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// e^x in a form the compiler can vectorise (libm's expf is a call per element, the hot part of
// GELU and the cross-entropy): x = k ln2 + r with k = round(x / ln2) and |r| <= ln2/2 (ln2 split
// in two constants so r keeps its low bits), e^r by the degree-7 Taylor-like polynomial of
// Cephes' expf (relative error ~1e-7, about one ulp), times 2^k made from k's exponent bits.
// x is clamped to [-87, 88], where 2^k stays a normal float: below, e^x is ~1e-38 instead of 0.
inline float vexp(float x) {
  x = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);  // NaN stays NaN
  constexpr float kRound = 12582912.0f;               // 1.5 * 2^23: adding it rounds
  const float z = x * 1.44269504088896341f + kRound;  // round(x / ln2) in the low bits
  const float k = z - kRound;
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;  // x - k ln2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // k's integer sits in z's low mantissa bits; unsigned arithmetic: no overflow, even for NaN.
  const uint32_t exponent = (std::bit_cast<uint32_t>(z) - std::bit_cast<uint32_t>(kRound) + 127u)
                            << 23;
  return p * std::bit_cast<float>(exponent);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): saturates correctly to +-1.
inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f);
}

MGPU_VECTOR_CLONES void gelu_forward(float* out, const float* inp, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanh(u));
  }
}

MGPU_VECTOR_CLONES void gelu_backward(float* dinp, const float* inp, const float* dout,
                                      int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    float th = fast_tanh(u);
    float sech2 = 1.0f - th * th;  // d tanh(u) / du
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    dinp[i] = local * dout[i];
  }
}

// LayerNorm over the last dim: y = (x - mean) * rstd * w + b. mean and rstd are saved so the
// backward pass need not recompute them.
MGPU_VECTOR_CLONES void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int64_t n,
                                          int64_t c) {
  constexpr float eps = 1e-5f;
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    float m = 0.0f;
    for (int64_t j = 0; j < c; j++) m += x[j];
    m /= static_cast<float>(c);
    float var = 0.0f;
    for (int64_t j = 0; j < c; j++) var += (x[j] - m) * (x[j] - m);
    var /= static_cast<float>(c);
    float s = 1.0f / std::sqrt(var + eps);
    float* y = out + i * c;
    for (int64_t j = 0; j < c; j++) y[j] = (x[j] - m) * s * weight[j] + bias[j];
    mean[i] = m;
    rstd[i] = s;
  }
}

// With xhat = (x - mean) * rstd and g = w * dy:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw += dy * xhat,  db += dy.
MGPU_VECTOR_CLONES void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                           const float* dout, const float* inp, const float* weight,
                                           const float* mean, const float* rstd, int64_t n,
                                           int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    const float* dy = dout + i * c;
    float m = mean[i], s = rstd[i];
    float g_mean = 0.0f, g_xhat_mean = 0.0f;
    for (int64_t j = 0; j < c; j++) {
      float xhat = (x[j] - m) * s;
      float g = weight[j] * dy[j];
      g_mean += g;
      g_xhat_mean += g * xhat;
    }
    g_mean /= static_cast<float>(c);
    g_xhat_mean /= static_cast<float>(c);
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) {
      float xhat = (x[j] - m) * s;
      float g = weight[j] * dy[j];
      dx[j] = s * (g - g_mean - xhat * g_xhat_mean);
      dweight[j] += dy[j] * xhat;
      dbias[j] += dy[j];
    }
  }
}

// Softmax over the last dim; subtracting the row max keeps exp() from overflowing.
MGPU_VECTOR_CLONES void softmax_forward(float* out, const float* inp, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    float* y = out + i * c;
    float mx = *std::max_element(x, x + c);
    float sum = 0.0f;
    for (int64_t j = 0; j < c; j++) {
      y[j] = std::exp(x[j] - mx);
      sum += y[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < c; j++) y[j] *= inv;
  }
}

// dx_j = y_j * (dy_j - sum_k y_k dy_k)
MGPU_VECTOR_CLONES void softmax_backward(float* dinp, const float* out, const float* dout,
                                         int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* y = out + i * c;
    const float* dy = dout + i * c;
    float dot = 0.0f;
    for (int64_t j = 0; j < c; j++) dot += y[j] * dy[j];
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) dx[j] = y[j] * (dy[j] - dot);
  }
}

namespace {
// C = alpha * op(A) @ op(B) + beta * C on strided row-major matrices: lets a GEMM read one head's
// [T, hs] slice of q, k or v straight out of qkv [B, T, 3C] (row stride 3C), without a copy.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  use_one_blas_thread();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a, int(lda), b,
              int(ldb), beta, c, int(ldc));
}
}  // namespace

// Per (batch, head): att = softmax(mask(q k^T / sqrt(hs))), out = att v. The mask makes token t
// look only at tokens 0..t: entries above the diagonal get probability exactly 0. The two
// products are GEMMs on the head's slices of qkv; the masked half is computed then discarded,
// which on a CPU is still much faster than a hand loop over the causal half.
MGPU_VECTOR_CLONES void attention_forward(float* out, float* att, const float* qkv, int64_t b,
                                          int64_t t, int64_t c, int64_t heads) {
  const int64_t hs = c / heads;  // head size
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t h = 0; h < heads; h++) {
      const float* q = qkv + bi * t * 3 * c + h * hs;  // [t, hs], row stride 3c
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* p = att + (bi * heads + h) * t * t;                           // [t, t]
      gemm(false, true, t, t, hs, scale, q, 3 * c, k, 3 * c, 0.0f, p, t);  // scores
      for (int64_t i = 0; i < t; i++) {  // causal softmax of each row
        float* row = p + i * t;
        float mx = *std::max_element(row, row + i + 1);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; j++) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; j++) row[j] *= inv;
        for (int64_t j = i + 1; j < t; j++) row[j] = 0.0f;
      }
      gemm(false, false, t, hs, t, 1.0f, p, t, v, 3 * c, 0.0f, out + bi * t * c + h * hs, c);
    }
  }
}

// The forward pass in reverse, per (batch, head), with P = att and dO = dout's head slice:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)) / sqrt(hs)  (softmax backward),
//   dQ = dS K,    dK = dS^T Q.  Masked entries have P = 0, so dS is 0 there too.
MGPU_VECTOR_CLONES void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                           const float* att, int64_t b, int64_t t, int64_t c,
                                           int64_t heads) {
  const int64_t hs = c / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> ds(static_cast<size_t>(t * t));  // dP, then dS, for one (batch, head)
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t h = 0; h < heads; h++) {
      const float* q = qkv + bi * t * 3 * c + h * hs;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = dqkv + bi * t * 3 * c + h * hs;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* p = att + (bi * heads + h) * t * t;
      const float* dout_h = dout + bi * t * c + h * hs;                     // [t, hs], row stride c
      gemm(true, false, t, hs, t, 1.0f, p, t, dout_h, c, 0.0f, dv, 3 * c);  // dV
      gemm(false, true, t, t, hs, 1.0f, dout_h, c, v, 3 * c, 0.0f, ds.data(), t);  // dP
      for (int64_t i = 0; i < t; i++) {
        const float* p_row = p + i * t;
        float* d_row = ds.data() + i * t;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; j++) dot += p_row[j] * d_row[j];
        for (int64_t j = 0; j <= i; j++) d_row[j] = p_row[j] * (d_row[j] - dot) * scale;
        for (int64_t j = i + 1; j < t; j++) d_row[j] = 0.0f;
      }
      gemm(false, false, t, hs, t, 1.0f, ds.data(), t, k, 3 * c, 0.0f, dq, 3 * c);  // dQ
      gemm(true, false, t, hs, t, 1.0f, ds.data(), t, q, 3 * c, 0.0f, dk, 3 * c);   // dK
    }
  }
}

MGPU_VECTOR_CLONES void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                          const float* wpe, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      const float* tok = wte + static_cast<int64_t>(tokens[bi * t + ti]) * c;
      const float* pos = wpe + ti * c;
      float* o = out + (bi * t + ti) * c;
      for (int64_t j = 0; j < c; j++) o[j] = tok[j] + pos[j];
    }
  }
}

// Scatter-add: a token id that appears several times collects the gradient of every occurrence.
MGPU_VECTOR_CLONES void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                           const int32_t* tokens, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      const float* d = dout + (bi * t + ti) * c;
      float* dtok = dwte + static_cast<int64_t>(tokens[bi * t + ti]) * c;
      float* dpos = dwpe + ti * c;
      for (int64_t j = 0; j < c; j++) {
        dtok[j] += d[j];
        dpos[j] += d[j];
      }
    }
  }
}

// loss_i = logsumexp(logits_i) - logits_i[target]; d loss_i / d logits_i = softmax - onehot.
MGPU_VECTOR_CLONES float cross_entropy_forward_backward(float* dlogits, const float* logits,
                                                        const int32_t* targets, int64_t n,
                                                        int64_t v, float grad_scale) {
  double total = 0.0;                                  // double: a sum over many tokens
  const float g = grad_scale / static_cast<float>(n);  // the mean over tokens
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    float* dx = dlogits + i * v;
    float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum += vexp(x[j] - mx);
    float log_sum = std::log(sum);
    const int32_t target = targets[i];
    total += static_cast<double>(log_sum + mx - x[target]);
    for (int64_t j = 0; j < v; j++) {
      float p = vexp(x[j] - mx - log_sum);
      dx[j] = g * (p - (j == target ? 1.0f : 0.0f));
    }
  }
  return static_cast<float>(total / static_cast<double>(n));
}

MGPU_VECTOR_CLONES float cross_entropy_loss(const float* logits, const int32_t* targets, int64_t n,
                                            int64_t v) {
  double total = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum += std::exp(x[j] - mx);
    total += static_cast<double>(std::log(sum) + mx - x[targets[i]]);
  }
  return static_cast<float>(total / static_cast<double>(n));
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
    for (int64_t j = 0; j < v; j++) sum += vexp(x[j] - mx);
    const int64_t local_target = targets[i] - v0;
    stats[i] = mx;
    stats[n + i] = sum;
    stats[2 * n + i] = local_target >= 0 && local_target < v ? x[local_target] : 0.0f;
  }
}

// Global half: lse = M + log(sum_r s_r exp(m_r - M)) with M the largest m_r; the loss is lse
// minus the target's logit (owned by one rank, the others sent 0); dx = g (exp(x - lse) - onehot).
MGPU_VECTOR_CLONES float vocab_parallel_ce_forward_backward(float* dlogits, const float* logits,
                                                            const float* all_stats,
                                                            const int32_t* targets, int64_t n,
                                                            int64_t v, int64_t v0, int64_t parts,
                                                            float grad_scale) {
  double total = 0.0;
  const float g = grad_scale / static_cast<float>(n);
  for (int64_t i = 0; i < n; i++) {
    float mx = all_stats[i], target_logit = 0.0f, sum = 0.0f;
    for (int64_t r = 0; r < parts; r++) mx = std::max(mx, all_stats[r * 3 * n + i]);
    for (int64_t r = 0; r < parts; r++) {
      const float* st = all_stats + r * 3 * n;
      sum += st[n + i] * vexp(st[i] - mx);
      target_logit += st[2 * n + i];
    }
    const float lse = mx + std::log(sum);
    total += static_cast<double>(lse - target_logit);
    const float* x = logits + i * v;
    float* dx = dlogits + i * v;
    const int64_t local_target = targets[i] - v0;
    for (int64_t j = 0; j < v; j++)
      dx[j] = g * (vexp(x[j] - lse) - (j == local_target ? 1.0f : 0.0f));
  }
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace mgpu::cpu

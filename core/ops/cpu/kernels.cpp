// Readable CPU kernels (llm.c style): loops over rows with contiguous inner loops, no allocation
// per element. GEMMs go to OpenBLAS; everything else is a few lines of arithmetic.
#include "core/ops/cpu/kernels.h"

#include "core/ops/cpu/vectorize.h"
#include "core/ops/math/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#ifdef MGPU_PLAIN_GEMM
#include "core/ops/cpu/plain_gemm.h"
#else
#include <cblas.h>

extern "C" void openblas_set_num_threads(int);
// OpenBLAS's pthread builds export this (their fork handler uses it); weak, so that a build of
// OpenBLAS without a pool links too.
extern "C" __attribute__((weak)) int blas_thread_shutdown_(void);
#endif

namespace mgpu::cpu {

namespace {
// C = alpha * op(A) @ op(B) + beta * C, row-major: OpenBLAS, or the plain loops of the web build
// (which has no OpenBLAS; core/ops/cpu/plain_gemm.h).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef MGPU_PLAIN_GEMM
  plain_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
#endif
}
}  // namespace

// The arithmetic of every loop below is core/ops/math/'s (math::), shared with the CUDA kernels;
// this file holds the loops: the indexing and the order in which each row is reduced.

void use_one_blas_thread() {
#ifndef MGPU_PLAIN_GEMM
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
#endif
}

void matmul(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a,
            bool trans_b, float beta) {
  use_one_blas_thread();
  // Row-major leading dimensions: a stored [m,k] (or [k,m] when transposed), b [k,n] (or [n,k]).
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
}

MGPU_VECTOR_CLONES void bias_add(float* out, const float* bias, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    float* row = out + i * c;
    for (int64_t j = 0; j < c; j++) row[j] = math::accumulate(row[j], bias[j]);
  }
}

MGPU_VECTOR_CLONES void bias_grad(float* dbias, const float* dout, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* row = dout + i * c;
    for (int64_t j = 0; j < c; j++) dbias[j] = math::accumulate(dbias[j], row[j]);
  }
}

MGPU_VECTOR_CLONES void add(float* out, const float* a, const float* b, int64_t count) {
  for (int64_t i = 0; i < count; i++) out[i] = math::accumulate(a[i], b[i]);
}

MGPU_VECTOR_CLONES void axpy(float* y, float alpha, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; i++) y[i] = math::axpy_value(y[i], alpha, x[i]);
}

MGPU_VECTOR_CLONES void scale(float* x, float alpha, int64_t count) {
  for (int64_t i = 0; i < count; i++) x[i] *= alpha;
}

MGPU_VECTOR_CLONES void gelu_forward(float* out, const float* inp, int64_t count) {
  for (int64_t i = 0; i < count; i++) out[i] = math::gelu(inp[i]);
}

MGPU_VECTOR_CLONES void gelu_backward(float* dinp, const float* inp, const float* dout,
                                      int64_t count) {
  for (int64_t i = 0; i < count; i++) dinp[i] = math::gelu_backward(inp[i], dout[i]);
}

// LayerNorm over the last dim: y = (x - mean) * rstd * w + b. mean and rstd are saved so the
// backward pass need not recompute them. Two passes (the mean, then the variance around it).
MGPU_VECTOR_CLONES void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int64_t n,
                                          int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    float sum = 0.0f;
    for (int64_t j = 0; j < c; j++) sum = math::accumulate(sum, x[j]);
    const float m = math::row_mean(sum, c);
    float squares = 0.0f;
    for (int64_t j = 0; j < c; j++)
      squares = math::accumulate(squares, math::squared_deviation(x[j], m));
    const float s = math::layernorm_rstd(math::row_mean(squares, c));
    float* y = out + i * c;
    for (int64_t j = 0; j < c; j++) y[j] = math::layernorm_out(x[j], m, s, weight[j], bias[j]);
    mean[i] = m;
    rstd[i] = s;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w * dy (math::layernorm_dx);
// dw += dy * xhat, db += dy.
MGPU_VECTOR_CLONES void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                           const float* dout, const float* inp, const float* weight,
                                           const float* mean, const float* rstd, int64_t n,
                                           int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    const float* dy = dout + i * c;
    const float m = mean[i], s = rstd[i];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (int64_t j = 0; j < c; j++) {
      const float g = math::layernorm_g(weight[j], dy[j]);
      g_sum = math::accumulate(g_sum, g);
      g_xhat_sum = math::accumulate(g_xhat_sum, g * math::layernorm_xhat(x[j], m, s));
    }
    const float g_mean = math::row_mean(g_sum, c);
    const float g_xhat_mean = math::row_mean(g_xhat_sum, c);
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) {
      const float xhat = math::layernorm_xhat(x[j], m, s);
      dx[j] = math::layernorm_dx(math::layernorm_g(weight[j], dy[j]), xhat, g_mean, g_xhat_mean, s);
      dweight[j] = math::accumulate(dweight[j], dy[j] * xhat);
      dbias[j] = math::accumulate(dbias[j], dy[j]);
    }
  }
}

// Softmax over the first `valid` entries of a row of c (the rest, a causal mask's, become 0).
namespace {
inline void softmax_row(float* y, const float* x, int64_t valid, int64_t c) {
  const float mx = *std::max_element(x, x + valid);
  float sum = 0.0f;
  for (int64_t j = 0; j < valid; j++) {
    y[j] = math::softmax_numerator(x[j], mx);
    sum = math::accumulate(sum, y[j]);
  }
  const float inv = math::reciprocal(sum);
  for (int64_t j = 0; j < valid; j++) y[j] *= inv;
  for (int64_t j = valid; j < c; j++) y[j] = 0.0f;
}

// The softmax backward of a row's first `valid` entries, times `scale`; 0 beyond.
inline void softmax_backward_row(float* dx, const float* y, const float* dy, int64_t valid,
                                 int64_t c, float scale) {
  float dot = 0.0f;
  for (int64_t j = 0; j < valid; j++) dot = math::accumulate(dot, y[j] * dy[j]);
  for (int64_t j = 0; j < valid; j++)
    dx[j] = math::softmax_backward_scaled(y[j], dy[j], dot, scale);
  for (int64_t j = valid; j < c; j++) dx[j] = 0.0f;
}
}  // namespace

MGPU_VECTOR_CLONES void softmax_forward(float* out, const float* inp, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) softmax_row(out + i * c, inp + i * c, c, c);
}

MGPU_VECTOR_CLONES void softmax_backward(float* dinp, const float* out, const float* dout,
                                         int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* y = out + i * c;
    const float* dy = dout + i * c;
    float dot = 0.0f;
    for (int64_t j = 0; j < c; j++) dot = math::accumulate(dot, y[j] * dy[j]);
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) dx[j] = math::softmax_backward(y[j], dy[j], dot);
  }
}

namespace {
// C = alpha * op(A) @ op(B) + beta * C on strided row-major matrices: lets a GEMM read one head's
// [T, hs] slice of q, k or v straight out of qkv [B, T, 3C] (row stride 3C), without a copy.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  use_one_blas_thread();
  sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
}  // namespace

// Per (batch, query head): att = softmax(mask(q k^T / sqrt(hs))), out = att v, where k and v are
// the head's kv head's (grouped-query attention: query head h reads kv head h / group). The mask
// makes token t look only at tokens 0..t: entries above the diagonal get probability exactly 0.
// The two products are GEMMs on the heads' slices of qkv; the masked half is computed then
// discarded, which on a CPU is still much faster than a hand loop over the causal half.
MGPU_VECTOR_CLONES void attention_forward(float* out, float* att, const float* qkv, int64_t b,
                                          int64_t t, int64_t c, int64_t heads, int64_t kv_heads) {
  const int64_t hs = c / heads, group = heads / kv_heads;  // head size, query heads per kv head
  const int64_t kv_c = kv_heads * hs, row = c + 2 * kv_c;  // qkv's row: q | k | v
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t h = 0; h < heads; h++) {
      const float* q = qkv + bi * t * row + h * hs;                    // [t, hs], row stride `row`
      const float* k = qkv + bi * t * row + c + (h / group) * hs;      // its kv head's keys
      const float* v = k + kv_c;                                       // ... and values
      float* p = att + (bi * heads + h) * t * t;                       // [t, t]
      gemm(false, true, t, t, hs, scale, q, row, k, row, 0.0f, p, t);  // scores
      for (int64_t i = 0; i < t; i++) softmax_row(p + i * t, p + i * t, i + 1, t);  // causal
      gemm(false, false, t, hs, t, 1.0f, p, t, v, row, 0.0f, out + bi * t * c + h * hs, c);
    }
  }
}

// The forward pass in reverse, per (batch, query head), with P = att and dO = dout's head slice:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)) / sqrt(hs)  (softmax backward),
//   dQ = dS K,    dK = dS^T Q.  Masked entries have P = 0, so dS is 0 there too.
// A kv head's dK and dV are the sums over its query group: the group's first head writes them
// (beta 0), the others add (beta 1), in ascending head order.
MGPU_VECTOR_CLONES void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                           const float* att, int64_t b, int64_t t, int64_t c,
                                           int64_t heads, int64_t kv_heads) {
  const int64_t hs = c / heads, group = heads / kv_heads;
  const int64_t kv_c = kv_heads * hs, row = c + 2 * kv_c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> ds(static_cast<size_t>(t * t));  // dP, then dS, for one (batch, head)
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t h = 0; h < heads; h++) {
      const int64_t kv_col = c + (h / group) * hs;
      const float beta = h % group == 0 ? 0.0f : 1.0f;  // first of its group: overwrite
      const float* q = qkv + bi * t * row + h * hs;
      const float* k = qkv + bi * t * row + kv_col;
      const float* v = k + kv_c;
      float* dq = dqkv + bi * t * row + h * hs;
      float* dk = dqkv + bi * t * row + kv_col;
      float* dv = dk + kv_c;
      const float* p = att + (bi * heads + h) * t * t;
      const float* dout_h = dout + bi * t * c + h * hs;                   // [t, hs], stride c
      gemm(true, false, t, hs, t, 1.0f, p, t, dout_h, c, beta, dv, row);  // dV
      gemm(false, true, t, t, hs, 1.0f, dout_h, c, v, row, 0.0f, ds.data(), t);  // dP
      for (int64_t i = 0; i < t; i++) {
        float* d_row = ds.data() + i * t;
        softmax_backward_row(d_row, p + i * t, d_row, i + 1, t, scale);
      }
      gemm(false, false, t, hs, t, 1.0f, ds.data(), t, k, row, 0.0f, dq, row);  // dQ
      gemm(true, false, t, hs, t, 1.0f, ds.data(), t, q, row, beta, dk, row);   // dK
    }
  }
}

MGPU_VECTOR_CLONES void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                          const float* wpe, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      const float* tok = wte + static_cast<int64_t>(tokens[bi * t + ti]) * c;
      float* o = out + (bi * t + ti) * c;
      if (!wpe) {  // rotary positions: the token's row alone
        for (int64_t j = 0; j < c; j++) o[j] = tok[j];
        continue;
      }
      const float* pos = wpe + ti * c;
      for (int64_t j = 0; j < c; j++) o[j] = math::embedding_value(tok[j], pos[j]);
    }
  }
}

// Scatter-add: a token id that appears several times collects the gradient of every occurrence,
// in the order of the rows.
MGPU_VECTOR_CLONES void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                           const int32_t* tokens, int64_t b, int64_t t, int64_t c) {
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      const float* d = dout + (bi * t + ti) * c;
      float* dtok = dwte + static_cast<int64_t>(tokens[bi * t + ti]) * c;
      for (int64_t j = 0; j < c; j++) dtok[j] = math::accumulate(dtok[j], d[j]);
      if (!dwpe) continue;  // rotary positions: no table
      float* dpos = dwpe + ti * c;
      for (int64_t j = 0; j < c; j++) dpos[j] = math::accumulate(dpos[j], d[j]);
    }
  }
}

}  // namespace mgpu::cpu

// Readable CPU kernels (llm.c style): loops over rows with contiguous inner loops, no allocation
// per element. GEMMs go to OpenBLAS; everything else is a few lines of arithmetic.
#include "core/ops/cpu/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace mgpu::cpu {

namespace {
// Ranks are threads: each one must run its GEMMs on its own core, not spawn a BLAS thread pool
// that competes with the other ranks. Done once, before the first GEMM.
void use_one_blas_thread() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}
}  // namespace

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

void bias_add(float* out, const float* bias, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    float* row = out + i * c;
    for (int64_t j = 0; j < c; j++) row[j] += bias[j];
  }
}

void bias_grad(float* dbias, const float* dout, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* row = dout + i * c;
    for (int64_t j = 0; j < c; j++) dbias[j] += row[j];
  }
}

void add(float* out, const float* a, const float* b, int64_t count) {
  for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}

void axpy(float* y, float alpha, const float* x, int64_t count) {
  for (int64_t i = 0; i < count; i++) y[i] += alpha * x[i];
}

void scale(float* x, float alpha, int64_t count) {
  for (int64_t i = 0; i < count; i++) x[i] *= alpha;
}

// GELU, tanh approximation (as in GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

void gelu_forward(float* out, const float* inp, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    float th = std::tanh(u);
    float sech2 = 1.0f - th * th;  // d tanh(u) / du
    float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    dinp[i] = local * dout[i];
  }
}

// LayerNorm over the last dim: y = (x - mean) * rstd * w + b. mean and rstd are saved so the
// backward pass need not recompute them.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t n, int64_t c) {
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
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t n, int64_t c) {
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
void softmax_forward(float* out, const float* inp, int64_t n, int64_t c) {
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
void softmax_backward(float* dinp, const float* out, const float* dout, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* y = out + i * c;
    const float* dy = dout + i * c;
    float dot = 0.0f;
    for (int64_t j = 0; j < c; j++) dot += y[j] * dy[j];
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) dx[j] = y[j] * (dy[j] - dot);
  }
}

// For each (batch, token t, head h): scores against keys 0..t (causal), softmax, weighted sum
// of values. Token t never looks at tokens after it.
void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t c,
                       int64_t heads) {
  const int64_t hs = c / heads;  // head size
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      for (int64_t h = 0; h < heads; h++) {
        const float* q = qkv + (bi * t + ti) * 3 * c + h * hs;
        float* att_row = att + ((bi * heads + h) * t + ti) * t;
        // scores and their max
        float mx = -INFINITY;
        for (int64_t t2 = 0; t2 <= ti; t2++) {
          const float* k = qkv + (bi * t + t2) * 3 * c + c + h * hs;
          float s = 0.0f;
          for (int64_t i = 0; i < hs; i++) s += q[i] * k[i];
          s *= scale;
          att_row[t2] = s;
          mx = std::max(mx, s);
        }
        // softmax over the visible keys; masked entries stay exactly 0
        float sum = 0.0f;
        for (int64_t t2 = 0; t2 <= ti; t2++) {
          att_row[t2] = std::exp(att_row[t2] - mx);
          sum += att_row[t2];
        }
        float inv = 1.0f / sum;
        for (int64_t t2 = 0; t2 <= ti; t2++) att_row[t2] *= inv;
        for (int64_t t2 = ti + 1; t2 < t; t2++) att_row[t2] = 0.0f;
        // weighted sum of values
        float* o = out + (bi * t + ti) * c + h * hs;
        for (int64_t i = 0; i < hs; i++) o[i] = 0.0f;
        for (int64_t t2 = 0; t2 <= ti; t2++) {
          const float* v = qkv + (bi * t + t2) * 3 * c + 2 * c + h * hs;
          float a = att_row[t2];
          for (int64_t i = 0; i < hs; i++) o[i] += a * v[i];
        }
      }
    }
  }
}

// The forward pass in reverse: out -> (att, v), att -> scores (softmax backward), scores -> (q, k).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        int64_t b, int64_t t, int64_t c, int64_t heads) {
  const int64_t hs = c / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::memset(dqkv, 0, static_cast<size_t>(b * t * 3 * c) * sizeof(float));
  std::vector<float> datt(static_cast<size_t>(t));  // d loss / d att for one row
  for (int64_t bi = 0; bi < b; bi++) {
    for (int64_t ti = 0; ti < t; ti++) {
      for (int64_t h = 0; h < heads; h++) {
        const float* q = qkv + (bi * t + ti) * 3 * c + h * hs;
        float* dq = dqkv + (bi * t + ti) * 3 * c + h * hs;
        const float* att_row = att + ((bi * heads + h) * t + ti) * t;
        const float* dout_row = dout + (bi * t + ti) * c + h * hs;
        // through the weighted sum: datt = dout . v, dv += att * dout
        float dot = 0.0f;  // sum_t2 att * datt, for the softmax backward
        for (int64_t t2 = 0; t2 <= ti; t2++) {
          const float* v = qkv + (bi * t + t2) * 3 * c + 2 * c + h * hs;
          float* dv = dqkv + (bi * t + t2) * 3 * c + 2 * c + h * hs;
          float d = 0.0f;
          for (int64_t i = 0; i < hs; i++) {
            d += dout_row[i] * v[i];
            dv[i] += att_row[t2] * dout_row[i];
          }
          datt[t2] = d;
          dot += att_row[t2] * d;
        }
        // through softmax and the scaled dot product
        for (int64_t t2 = 0; t2 <= ti; t2++) {
          float dscore = att_row[t2] * (datt[t2] - dot) * scale;
          const float* k = qkv + (bi * t + t2) * 3 * c + c + h * hs;
          float* dk = dqkv + (bi * t + t2) * 3 * c + c + h * hs;
          for (int64_t i = 0; i < hs; i++) {
            dq[i] += dscore * k[i];
            dk[i] += dscore * q[i];
          }
        }
      }
    }
  }
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c) {
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
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c) {
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
float cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets,
                                     int64_t n, int64_t v, float grad_scale) {
  double total = 0.0;                                  // double: a sum over many tokens
  const float g = grad_scale / static_cast<float>(n);  // the mean over tokens
  for (int64_t i = 0; i < n; i++) {
    const float* x = logits + i * v;
    float* dx = dlogits + i * v;
    float mx = *std::max_element(x, x + v);
    float sum = 0.0f;
    for (int64_t j = 0; j < v; j++) sum += std::exp(x[j] - mx);
    float log_sum = std::log(sum);
    const int32_t target = targets[i];
    total += static_cast<double>(log_sum + mx - x[target]);
    for (int64_t j = 0; j < v; j++) {
      float p = std::exp(x[j] - mx - log_sum);
      dx[j] = g * (p - (j == target ? 1.0f : 0.0f));
    }
  }
  return static_cast<float>(total / static_cast<double>(n));
}

float cross_entropy_loss(const float* logits, const int32_t* targets, int64_t n, int64_t v) {
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

}  // namespace mgpu::cpu

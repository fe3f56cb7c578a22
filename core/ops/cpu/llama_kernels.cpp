// The CPU kernels of a Llama-style block's ops: RMSNorm, SwiGLU and rotary positions (RoPE).
// Readable loops in the style of kernels.cpp; the arithmetic is core/ops/math/llama.h's, which
// the CUDA kernels (core/ops/cuda/llama_kernels.cu) call too. Grouped-query attention is the
// attention kernel's own generalisation (kernels.cpp).
#include <cstdint>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cpu/vectorize.h"
#include "core/ops/math/llama.h"

namespace mgpu::cpu {

// RMSNorm over the last dim: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), saved for the
// backward. One pass for the mean square (added in ascending j), one to write the row.
MGPU_VECTOR_CLONES void rmsnorm_forward(float* out, float* rstd, const float* inp,
                                        const float* weight, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    float squares = 0.0f;
    for (int64_t j = 0; j < c; j++) squares = math::accumulate(squares, math::square(x[j]));
    const float s = math::rmsnorm_rstd(math::row_mean(squares, c));
    float* y = out + i * c;
    for (int64_t j = 0; j < c; j++) y[j] = math::rmsnorm_out(x[j], s, weight[j]);
    rstd[i] = s;
  }
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = w * dy (math::rmsnorm_dx); dw += dy * xhat.
MGPU_VECTOR_CLONES void rmsnorm_backward(float* dinp, float* dweight, const float* dout,
                                         const float* inp, const float* weight, const float* rstd,
                                         int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; i++) {
    const float* x = inp + i * c;
    const float* dy = dout + i * c;
    const float s = rstd[i];
    float g_xhat_sum = 0.0f;
    for (int64_t j = 0; j < c; j++)
      g_xhat_sum = math::accumulate(
          g_xhat_sum, math::layernorm_g(weight[j], dy[j]) * math::rmsnorm_xhat(x[j], s));
    const float g_xhat_mean = math::row_mean(g_xhat_sum, c);
    float* dx = dinp + i * c;
    for (int64_t j = 0; j < c; j++) {
      const float xhat = math::rmsnorm_xhat(x[j], s);
      const float d = dy[j];  // read before dx[j] is written: dinp may alias dout
      dx[j] = math::rmsnorm_dx(math::layernorm_g(weight[j], d), xhat, g_xhat_mean, s);
      dweight[j] = math::accumulate(dweight[j], d * xhat);
    }
  }
}

// out[i, j] = silu(gate[i, j]) * up[i, j], with gate_up[i] = gate (f columns) | up (f columns).
MGPU_VECTOR_CLONES void swiglu_forward(float* out, const float* gate_up, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; i++) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    float* y = out + i * f;
    for (int64_t j = 0; j < f; j++) y[j] = math::swiglu(gate[j], up[j]);
  }
}

MGPU_VECTOR_CLONES void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout,
                                        int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; i++) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    const float* dy = dout + i * f;
    float* dgate = dgate_up + i * 2 * f;
    float* dup = dgate + f;
    for (int64_t j = 0; j < f; j++) {
      const math::SwigluGrad g = math::swiglu_backward(gate[j], up[j], dy[j]);
      dgate[j] = g.dgate;
      dup[j] = g.dup;
    }
  }
}

namespace {
// RoPE on x [b, t, heads * hs] in place: the pair (2i, 2i+1) of every head of token ti turns by
// positions[ti] * theta^(-2i/hs), or by minus that (`inverse`, the backward). The cosines and
// sines depend on (token, pair) only: one table [t, hs/2] per call, shared by batch rows and heads.
void rope_rotate_all(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                     int64_t hs, int64_t c, float theta, bool inverse) {
  const int64_t pairs = hs / 2;
  std::vector<math::RopeAngle> angles(static_cast<size_t>(t * pairs));
  for (int64_t ti = 0; ti < t; ti++)
    for (int64_t i = 0; i < pairs; i++)
      angles[static_cast<size_t>(ti * pairs + i)] = math::rope_angle(positions[ti], i, hs, theta);
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t ti = 0; ti < t; ti++) {
      const math::RopeAngle* a = angles.data() + ti * pairs;
      float* row = x + (bi * t + ti) * c;
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < pairs; i++) {
          float* p = row + h * hs + 2 * i;
          math::rope_rotate(p, p + 1, a[i].cos, inverse ? -a[i].sin : a[i].sin);
        }
    }
}
}  // namespace

void rope_forward(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                  int64_t head_size, int64_t row_width, float theta) {
  rope_rotate_all(x, positions, b, t, heads, head_size, row_width, theta, false);
}

void rope_backward(float* dx, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                   int64_t head_size, int64_t row_width, float theta) {
  rope_rotate_all(dx, positions, b, t, heads, head_size, row_width, theta, true);
}

}  // namespace mgpu::cpu

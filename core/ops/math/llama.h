// The per-element and per-row math of a Llama-style block's ops, shared by the CPU kernels
// (core/ops/cpu/llama_kernels.cpp) and the CUDA kernels (core/ops/cuda/llama_kernels.cu): RMSNorm
// (Zhang & Sennrich 2019), SwiGLU (Shazeer 2020) and rotary positions (RoPE, Su et al. 2021).
// As in elementwise.h, each function fixes the order of its float operations and neither side
// fuses a multiply-add, so an element computed here has the same bits on either side; what stays
// side-specific is the order in which a row's sum is added (passed in, not computed here).
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/elementwise.h"
#include "core/ops/math/hd.h"

namespace mgpu::math {

// ---- RMSNorm over the last dim: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) -------------
// No mean is subtracted and there is no bias: the row is only rescaled to unit root mean square.

constexpr float kRmsnormEps = 1e-5f;

// One summand of the row's mean square.
MGPU_HD float square(float x) {
  return x * x;
}

MGPU_HD float rmsnorm_rstd(float mean_square) {
  return 1.0f / sqrtf(mean_square + kRmsnormEps);
}

MGPU_HD float rmsnorm_xhat(float x, float rstd) {
  return x * rstd;
}

MGPU_HD float rmsnorm_out(float x, float rstd, float w) {
  return x * rstd * w;
}

// With xhat = x * rstd and g = w * dy (layernorm_g), d rstd / dx_k = -rstd^3 x_k / C gives
//   dx = rstd * (g - xhat * mean(g * xhat)),  dw += dy * xhat.
// (layernorm's without the mean(g) term: there is no mean to move.)
MGPU_HD float rmsnorm_dx(float g, float xhat, float g_xhat_mean, float rstd) {
  return rstd * (g - xhat * g_xhat_mean);
}

// ---- SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + e^-x) = x * sigmoid(x) -------------------
// e^-x through vexp (the polynomial both sides run), so the GPU gets the CPU's bits. vexp's clamp
// to [-87, 88] only touches |x| > 87, where silu is x or 0 to float precision anyway.

MGPU_HD float sigmoid(float x) {
  return 1.0f / (1.0f + vexp(-x));
}

MGPU_HD float silu(float x) {
  return x / (1.0f + vexp(-x));
}

MGPU_HD float swiglu(float gate, float up) {
  return silu(gate) * up;
}

// d silu / dx = s + x s (1 - s) = s (1 + x (1 - s)) with s = sigmoid(x);
// d out / d gate = up * silu'(gate), d out / d up = silu(gate).
struct SwigluGrad {
  float dgate, dup;
};
MGPU_HD SwigluGrad swiglu_backward(float gate, float up, float dy) {
  const float s = sigmoid(gate);
  const float dsilu = s * (1.0f + gate * (1.0f - s));
  return {dy * up * dsilu, dy * silu(gate)};
}

// ---- RoPE: rotate the pair (2i, 2i+1) of a head by position * theta^(-2i/D) ---------------------
// The angle, its cosine and its sine are computed in double and rounded once to float: a large
// position times a small frequency keeps its digits (in float, position 10^5 would lose ~3 of
// them), and the host's libm and CUDA's double pow/cos/sin (within 2 double ulps) round to the
// same float except where the exact value lies within those ulps of a float rounding boundary.

struct RopeAngle {
  float cos, sin;
};
MGPU_HD RopeAngle rope_angle(int32_t position, int64_t pair, int64_t head_size, float theta) {
  const double frequency = pow(double(theta), -2.0 * double(pair) / double(head_size));
  const double angle = double(position) * frequency;
  return {static_cast<float>(cos(angle)), static_cast<float>(sin(angle))};
}

// (x0, x1) <- (x0 cos - x1 sin, x0 sin + x1 cos). The backward rotates by -angle: the same call
// with the sine negated (exact), i.e. the transpose of the rotation.
MGPU_HD void rope_rotate(float* x0, float* x1, float c, float s) {
  const float a = *x0, b = *x1;
  *x0 = a * c - b * s;
  *x1 = a * s + b * c;
}

}  // namespace mgpu::math

// The optimizers' update of one element, written once for the CPU loops
// (core/ops/cpu/optimizer_kernels.cpp) and the CUDA kernels (core/ops/cuda/optimizer_kernels.cu):
// the same float operations in the same order, no fused multiply-adds on either side
// (core/CMakeLists.txt), so a parameter updated on the GPU has the CPU's bits. The formulas:
// core/ops/optimizer_kernels.h.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/hd.h"

namespace mgpu::math {

// SGD with momentum and coupled L2 weight decay (torch.optim.SGD). momentum_buf is null when
// momentum is 0: the buffer is then neither read nor written.
MGPU_HD void sgd_momentum_element(float* param, float grad, float* momentum_buf, float lr,
                                  float momentum, float weight_decay) {
  float d = grad + weight_decay * *param;
  if (momentum_buf) {
    *momentum_buf = momentum * *momentum_buf + d;
    d = *momentum_buf;
  }
  *param -= lr * d;
}

// AdamW's decoupled weight decay as one factor on the weight: 1 - lr * weight_decay.
MGPU_HD float adamw_decay(float lr, float weight_decay) {
  return 1.0f - lr * weight_decay;
}

// 1 - beta^step: dividing a moment by it undoes its bias towards the zero start (in double: the
// power of a number close to 1).
MGPU_HD double adamw_bias_correction(float beta, int64_t step) {
  return 1.0 - pow(static_cast<double>(beta), static_cast<double>(step));
}

// AdamW (Loshchilov & Hutter 2019): decay the weight, update both moments, step by the
// bias-corrected m / (sqrt(v) + eps). bias1/bias2 from adamw_bias_correction.
MGPU_HD void adamw_element(float* param, float grad, float* m, float* v, float lr, float beta1,
                           float beta2, float eps, float decay, double bias1, double bias2) {
  float p = *param * decay;  // decoupled weight decay: shrink the weight, not the gradient
  const float m_new = beta1 * *m + (1.0f - beta1) * grad;
  const float v_new = beta2 * *v + (1.0f - beta2) * grad * grad;
  const float m_hat = static_cast<float>(m_new / bias1);
  const float v_hat = static_cast<float>(v_new / bias2);
  p -= lr * m_hat / (sqrtf(v_hat) + eps);
  *param = p;
  *m = m_new;
  *v = v_new;
}

}  // namespace mgpu::math

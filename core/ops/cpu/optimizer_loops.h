// The CPU optimizer updates on raw pointers, with the CUDA table's signatures (cuda_table.h):
// ops::sgd_momentum_update / adamw_update run them on cpu tensors, and the emulated CUDA table
// (core/ops/cuda_emulation.cpp) installs them as its sgd_momentum / adamw entries.
#pragma once
#include <cstdint>

namespace mgpu::cpu {

void sgd_momentum(float* param, const float* grad, float* momentum_buf, int64_t n, float lr,
                  float momentum, float weight_decay);
// bias1 = 1 - beta1^step, bias2 = 1 - beta2^step.
void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, double bias1, double bias2);

}  // namespace mgpu::cpu

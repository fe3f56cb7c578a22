// Optimizer update kernels. Each updates every element of the tensors it is given, which must all
// have the same number of elements. Pass flat_range() views to update a slice of a parameter:
// that is how a sharded optimizer (ZeRO) updates only the shard its rank owns.
//
// Tensors are handles to shared storage, so they are taken by value: the kernel writes through
// them into the caller's memory. On the phantom device the kernels do no math but still charge
// their FLOPs and bytes to the modeled clock.
#pragma once
#include <cstdint>

#include "core/tensor/tensor.h"

namespace mgpu::ops {

// SGD with momentum and (classic, coupled) L2 weight decay, as torch.optim.SGD:
//   g   = grad + weight_decay * param
//   buf = momentum * buf + g
//   param -= lr * buf
// With momentum == 0 the buffer is not touched and may be undefined.
void sgd_momentum_update(Tensor param, Tensor grad, Tensor momentum_buf, float lr, float momentum,
                         float weight_decay);

// AdamW (Loshchilov & Hutter), as torch.optim.AdamW; `step` counts from 1:
//   param *= 1 - lr * weight_decay                  (decoupled: not part of the gradient)
//   m = beta1 * m + (1 - beta1) * grad
//   v = beta2 * v + (1 - beta2) * grad^2
//   param -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step);

}  // namespace mgpu::ops

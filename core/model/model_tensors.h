// The tensors the model's layers make for themselves, tagged for the allocator: activations kept
// from forward to backward, a step's workspace, and layernorm statistics.
#pragma once
#include "core/tensor/tensor.h"

namespace mgpu {

inline Tensor activation(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, MemCategory::activations, dtype);
}
inline Tensor workspace(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, MemCategory::workspace, dtype);
}
// Layernorm statistics stay fp32 in every precision (as fused GPU layernorm kernels keep them).
inline Tensor statistics(const Shape& shape) {
  return Tensor::empty(shape, MemCategory::activations, DType::f32);
}

}  // namespace mgpu

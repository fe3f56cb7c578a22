// A trainable parameter: its value and its gradient, tagged `parameters` and `gradients` in the
// rank's allocator. Models hand their parameters out as std::vector<Param*> in a fixed order
// (forward order); optimizers, data-parallel gradient sync and checkpoints all use that list.
#pragma once
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace mgpu {

struct Param {
  std::string name;  // "blocks.3.attn.qkv.weight"
  Tensor data;
  Tensor grad;

  Param() = default;
  Param(std::string name_, const Shape& shape)
      : name(std::move(name_)),
        data(Tensor::zeros(shape, MemCategory::parameters)),
        grad(Tensor::zeros(shape, MemCategory::gradients)) {}
};

using ParamList = std::vector<Param*>;

}  // namespace mgpu

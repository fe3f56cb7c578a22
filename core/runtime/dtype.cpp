#include "core/runtime/dtype.h"

#include <stdexcept>

namespace mgpu {

DType parse_precision(const std::string& text) {
  if (text == "fp32" || text == "f32") return DType::f32;
  if (text == "bf16") return DType::bf16;
  if (text == "fp16" || text == "f16") return DType::f16;
  throw std::invalid_argument("unknown precision '" + text + "' (use fp32, bf16 or fp16)");
}

}  // namespace mgpu

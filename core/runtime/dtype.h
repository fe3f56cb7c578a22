// Element types. f32 is the reference type; bf16 and f16 are the 2-byte training types of mixed
// precision. On the CPU they are emulated exactly: tensors really hold 2 bytes per element, and
// every store rounds an fp32 value to the nearest representable one (ties to even), with each
// type's range: bf16 keeps fp32's 8 exponent bits (range to ~3.4e38, 8 significant bits); f16 has
// 5 (largest finite 65504, overflow to inf, subnormals down to 2^-24, smaller values flush to 0).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/ops/math/cast.h"  // DType and the conversions (C++17, shared with the GPU)

namespace mgpu {

constexpr size_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}
constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16";
}
// The training-precision names of the command line: "fp32", "bf16", "fp16".
constexpr std::string_view precision_name(DType t) {
  return t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "fp16";
}
// "fp32"/"f32", "bf16", "fp16"/"f16"; throws std::invalid_argument naming the choices.
DType parse_precision(const std::string& text);

// The conversions themselves live in core/ops/math/cast.h, shared with the CUDA kernels so that
// both sides round with the same code; these names are what the host code calls.
using math::bf16_bits_to_f32;
using math::f16_bits_to_f32;
using math::f32_to_bf16_bits;
using math::f32_to_f16_bits;
using math::round_to;  // rounds `value` to the nearest value of type t (identity for f32)

}  // namespace mgpu

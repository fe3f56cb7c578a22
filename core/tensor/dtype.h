// Element types. f32 is the training type today; bf16 has its slot so mixed precision can land
// without changing any signature.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mgpu {

enum class DType : uint8_t { f32, bf16 };

constexpr size_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}
constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "f32" : "bf16";
}

}  // namespace mgpu

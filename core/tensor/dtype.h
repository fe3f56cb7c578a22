// Element types. f32 is the reference type; bf16 and f16 are the 2-byte training types of mixed
// precision. On the CPU they are emulated exactly: tensors really hold 2 bytes per element, and
// every store rounds an fp32 value to the nearest representable one (ties to even), with each
// type's range: bf16 keeps fp32's 8 exponent bits (range to ~3.4e38, 8 significant bits); f16 has
// 5 (largest finite 65504, overflow to inf, subnormals down to 2^-24, smaller values flush to 0).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mgpu {

enum class DType : uint8_t { f32, bf16, f16 };

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

// ---- bf16: the top 16 bits of an fp32 ------------------------------------------------------

constexpr uint16_t f32_to_bf16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Round to nearest, ties to even: add just under half an ulp of bf16, plus 1 when the kept
  // part is odd. A carry out of the mantissa bumps the exponent (and the largest values to inf).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
constexpr float bf16_bits_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// ---- f16 (IEEE binary16): 1 sign, 5 exponent (bias 15), 10 mantissa bits -----------------------

constexpr uint16_t f32_to_f16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;   // NaN stays NaN (quiet)
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (half-way past 65504): inf
  const int exp = static_cast<int>(abs >> 23) - 127;
  if (exp >= -14) {  // normal f16: keep 10 of the 23 mantissa bits, round the 13 dropped
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded >> 13) - ((127u - 15u) << 10));
  }
  if (exp < -25) return sign;  // below half the smallest subnormal: flushes to zero
  // Subnormal f16: value = m * 2^-24 with m in [0, 1024]. Shift the full significand (with its
  // implicit 1) so that bit 0 is 2^-24, rounding the bits shifted out to nearest, ties to even.
  const uint32_t significand = (abs & 0x7FFFFFu) | 0x800000u;
  const int shift = -exp - 1;  // 14..24: significand * 2^(exp-23) = (significand >> shift) * 2^-24
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t up = (dropped > half || (dropped == half && (kept & 1u))) ? 1u : 0u;
  return sign | static_cast<uint16_t>(kept + up);  // kept + up == 1024 is the smallest normal
}
constexpr float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24, exact in fp32
  const float magnitude = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

// Rounds `value` to the nearest value of type t (identity for f32).
constexpr float round_to(DType t, float value) {
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(value));
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(value));
  return value;
}

}  // namespace mgpu

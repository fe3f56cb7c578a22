// fp32 <-> bf16 / fp16 conversions, written once for the CPU and the GPU (MGPU_HD): the CPU's
// emulated 2-byte storage (core/runtime/dtype.h wraps these), the CUDA convert kernel and the GPU's
// staging of 2-byte tensors all round with the same code, so a value stored on either side has
// the same bits.
//
// Rounding is to nearest, ties to even, with each type's range: bf16 keeps fp32's 8 exponent bits
// (range to ~3.4e38, 8 significant bits; the top 16 bits of an fp32); f16 (IEEE binary16) has 5
// (largest finite 65504, values from 65520 up overflow to inf, subnormals down to 2^-24, values
// at or below 2^-25 flush to 0). A NaN stays a NaN (quiet), with its sign.
//
// C++17 (nvcc compiles the .cu files that include this as C++17): no std::bit_cast, so the
// bit reinterpretations below go through memcpy on the host and the intrinsics on the device.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/ops/math/hd.h"

namespace mgpu {

// Element types. f32 is the reference type; bf16 and f16 are the 2-byte training types of mixed
// precision. Defined here (not in the C++20 core/runtime/dtype.h) so device code can name them.
enum class DType : uint8_t { f32, bf16, f16 };

namespace math {

MGPU_HD uint32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

MGPU_HD float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// True for inf and NaN (all exponent bits set): the loss scaler's overflow test, on bits so that
// it means the same under any fast-math flag of either compiler.
MGPU_HD bool is_nonfinite(float value) {
  return (float_bits(value) & 0x7F800000u) == 0x7F800000u;
}

// ---- bf16: the top 16 bits of an fp32 ------------------------------------------------------

MGPU_HD uint16_t f32_to_bf16_bits(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Round to nearest, ties to even: add just under half an ulp of bf16, plus 1 when the kept
  // part is odd. A carry out of the mantissa bumps the exponent (and the largest values to inf).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

MGPU_HD float bf16_bits_to_f32(uint16_t bits) {
  return bits_float(static_cast<uint32_t>(bits) << 16);
}

// ---- f16 (IEEE binary16): 1 sign, 5 exponent (bias 15), 10 mantissa bits -----------------------

MGPU_HD uint16_t f32_to_f16_bits(float value) {
  const uint32_t bits = float_bits(value);
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

MGPU_HD float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24, exact in fp32
  const float magnitude = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

// ---- one element of a 2-byte type --------------------------------------------------------------

// `value` rounded to the 2-byte type t (bf16 or f16) as stored bits, and those bits widened back
// (exactly: every bf16/f16 value is an fp32 value).
MGPU_HD uint16_t f32_to_2byte_bits(DType t, float value) {
  return t == DType::bf16 ? f32_to_bf16_bits(value) : f32_to_f16_bits(value);
}
MGPU_HD float bits_2byte_to_f32(DType t, uint16_t bits) {
  return t == DType::bf16 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
}

// Rounds `value` to the nearest value of type t (identity for f32).
MGPU_HD float round_to(DType t, float value) {
  if (t == DType::f32) return value;
  return bits_2byte_to_f32(t, f32_to_2byte_bits(t, value));
}

// What a store of `value` as `bits` (type t, 2 bytes) lost to the range: a nonzero value that
// became 0 (underflow), a finite value that became inf (overflow). The fp16 lesson counts both.
MGPU_HD bool store_flushed_to_zero(float value, uint16_t bits) {
  return (bits & 0x7FFFu) == 0 && value != 0.0f;
}
MGPU_HD bool store_overflowed_to_inf(DType t, float value, uint16_t bits) {
  const uint16_t inf = t == DType::bf16 ? 0x7F80u : 0x7C00u;
  return (bits & 0x7FFFu) == inf && !is_nonfinite(value);
}

}  // namespace math
}  // namespace mgpu

#include "core/ops/cpu/precision.h"

#include <cstring>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/tensor/tensor.h"

namespace mgpu::cpu {

namespace {

void widen(float* dst, const uint16_t* bits, DType type, int64_t count) {
  if (type == DType::bf16)
    for (int64_t i = 0; i < count; ++i) dst[i] = math::bf16_bits_to_f32(bits[i]);
  else
    for (int64_t i = 0; i < count; ++i) dst[i] = math::f16_bits_to_f32(bits[i]);
}

// Rounds each value once into `type`, counting what the range lost (the fp16 lesson's figures).
void narrow(uint16_t* bits, DType type, const float* src, int64_t count) {
  int64_t flushed = 0, overflowed = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t b = math::f32_to_2byte_bits(type, src[i]);
    bits[i] = b;
    flushed += math::store_flushed_to_zero(src[i], b);
    overflowed += math::store_overflowed_to_inf(type, src[i], b);
  }
  store_counters().flushed_to_zero += flushed;
  store_counters().overflowed_to_inf += overflowed;
}

std::vector<float> widened(const void* x, DType type, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  convert(values.data(), DType::f32, x, type, count);
  return values;
}

}  // namespace

void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count) {
  if (count <= 0) return;
  if (dst_type == src_type) {
    std::memmove(dst, src, static_cast<size_t>(count) * (dst_type == DType::f32 ? 4 : 2));
    return;
  }
  if (dst_type == DType::f32) {
    widen(static_cast<float*>(dst), static_cast<const uint16_t*>(src), src_type, count);
    return;
  }
  if (src_type == DType::f32) {
    narrow(static_cast<uint16_t*>(dst), dst_type, static_cast<const float*>(src), count);
    return;
  }
  const std::vector<float> wide = widened(src, src_type, count);  // bf16 <-> f16: via fp32
  narrow(static_cast<uint16_t*>(dst), dst_type, wide.data(), count);
}

int64_t count_nonfinite(const void* x, DType type, int64_t count) {
  int64_t bad = 0;
  if (type == DType::f32) {
    const auto* v = static_cast<const float*>(x);
    for (int64_t i = 0; i < count; ++i) bad += math::is_nonfinite(v[i]);
    return bad;
  }
  const auto* bits = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < count; ++i)
    bad += math::is_nonfinite(math::bits_2byte_to_f32(type, bits[i]));
  return bad;
}

void matmul_2byte(void* c, const void* a, const void* b, DType type, int64_t m, int64_t n,
                  int64_t k, bool trans_a, bool trans_b, float beta) {
  const std::vector<float> wide_a = widened(a, type, m * k), wide_b = widened(b, type, k * n);
  std::vector<float> wide_c = widened(c, type, m * n);
  matmul(wide_c.data(), wide_a.data(), wide_b.data(), m, n, k, trans_a, trans_b, beta);
  narrow(static_cast<uint16_t*>(c), type, wide_c.data(), m * n);
}

}  // namespace mgpu::cpu

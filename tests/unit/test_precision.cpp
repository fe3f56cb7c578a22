// Mixed precision: bf16/fp16 rounding bit for bit against reference values, 2-byte tensors, the
// memory per parameter measured by the allocator, and bf16 training close to fp32.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "common/selected_seams.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/ops/cpu/kernels.h"
#include "core/ops/cpu/precision.h"
#include "core/ops/cuda_table.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/ddp.h"
#include "core/parallel/hybrid.h"
#include "core/runtime/context.h"
#include "core/train/trainer.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "lessons/lesson.h"
#include "lessons/training.h"

namespace test_precision {

using namespace mgpu;

namespace {
float from_bits(uint32_t b) {
  return std::bit_cast<float>(b);
}
float pow2(int e) {
  return std::ldexp(1.0f, e);
}
}  // namespace

TEST_CASE("bf16 rounds to nearest even, keeps inf/NaN, overflows and handles subnormals",
          "[precision]") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(f32_to_bf16_bits(-2.0f) == 0xC000);
  CHECK(f32_to_bf16_bits(from_bits(0x3F808000)) == 0x3F80);  // tie, kept part even: down
  CHECK(f32_to_bf16_bits(from_bits(0x3F818000)) == 0x3F82);  // tie, kept part odd: up
  CHECK(f32_to_bf16_bits(from_bits(0x3F808001)) == 0x3F81);  // just above half: up
  CHECK(f32_to_bf16_bits(from_bits(0x3F807FFF)) == 0x3F80);  // just below half: down
  CHECK(f32_to_bf16_bits(from_bits(0x7F7F7FFF)) == 0x7F7F);
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(f32_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(f32_to_bf16_bits(from_bits(0x7FC00000)) == 0x7FC0);
  CHECK(f32_to_bf16_bits(from_bits(0x7F800001)) == 0x7FC0);  // signalling NaN stays a NaN
  CHECK(f32_to_bf16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_bf16_bits(from_bits(0x00010000)) == 0x0001);  // fp32 subnormal, exact
  CHECK(f32_to_bf16_bits(from_bits(0x00018000)) == 0x0002);  // subnormal tie, odd: up
  CHECK(f32_to_bf16_bits(from_bits(0x00008000)) == 0x0000);  // subnormal tie, even: to 0
  CHECK(f32_to_bf16_bits(from_bits(0x807FFFFF)) == 0x8080);  // up into the smallest normal
  CHECK(bf16_bits_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_bits_to_f32(0x4049) == 3.140625f);
  CHECK(round_to(DType::bf16, 3.14159265f) == 3.140625f);
  CHECK(std::isnan(bf16_bits_to_f32(0x7FC0)));
}

TEST_CASE("fp16 rounds to nearest even with its range: 65504, inf, subnormals, flush to zero",
          "[precision]") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3C00);
  CHECK(f32_to_f16_bits(-2.0f) == 0xC000);
  CHECK(f32_to_f16_bits(0.1f) == 0x2E66);
  CHECK(f32_to_f16_bits(1.0f / 3.0f) == 0x3555);
  CHECK(f32_to_f16_bits(1.0f + pow2(-11)) == 0x3C00);      // tie, even: down
  CHECK(f32_to_f16_bits(1.0f + 3 * pow2(-11)) == 0x3C02);  // tie, odd: up
  CHECK(f32_to_f16_bits(65504.0f) == 0x7BFF);              // largest finite
  CHECK(f32_to_f16_bits(65519.0f) == 0x7BFF);              // below half an ulp past it
  CHECK(f32_to_f16_bits(65520.0f) == 0x7C00);              // the tie rounds to inf
  CHECK(f32_to_f16_bits(1e6f) == 0x7C00);
  CHECK(f32_to_f16_bits(-1e6f) == 0xFC00);
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
  CHECK(f32_to_f16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_f16_bits(pow2(-14)) == 0x0400);              // smallest normal
  CHECK(f32_to_f16_bits(pow2(-24)) == 0x0001);              // smallest subnormal
  CHECK(f32_to_f16_bits(1023 * pow2(-24)) == 0x03FF);       // largest subnormal
  CHECK(f32_to_f16_bits(1023.5f * pow2(-24)) == 0x0400);    // tie, odd: up to normal
  CHECK(f32_to_f16_bits(pow2(-25)) == 0x0000);              // tie with 0: even is 0
  CHECK(f32_to_f16_bits(from_bits(0x33000001)) == 0x0001);  // just above: 2^-24
  CHECK(f32_to_f16_bits(3 * pow2(-25)) == 0x0002);          // 1.5 ulp: tie to 2
  CHECK(f32_to_f16_bits(5 * pow2(-25)) == 0x0002);          // 2.5 ulp: tie to 2
  CHECK(f32_to_f16_bits(1e-8f) == 0x0000);                  // flushed to zero
  CHECK(f32_to_f16_bits(-1e-8f) == 0x8000);
  CHECK(f16_bits_to_f32(0x0001) == pow2(-24));
  CHECK(f16_bits_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_bits_to_f32(0x3555) == 0.333251953125f);
  CHECK(std::isinf(f16_bits_to_f32(0x7C00)));
  CHECK(std::isnan(f16_bits_to_f32(0x7E00)));
  // Every one of the 63488 finite fp16 values survives a round trip through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7C00) != 0x7C00) REQUIRE(f32_to_f16_bits(f16_bits_to_f32(uint16_t(h))) == h);
}

namespace {
// The nearest value of a binary format with `mantissa_bits` stored bits, smallest normal exponent
// `min_exp` and largest finite `max_finite`, computed in double (exact for every fp32 input):
// ties to even by nearbyint's default rounding, inf past the largest finite after rounding.
// Independent of cast.h's bit manipulation.
double reference_round(double x, int mantissa_bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  const int exp = std::max(std::ilogb(std::fabs(x)), min_exp);  // subnormals: fixed spacing
  const double ulp = std::ldexp(1.0, exp - mantissa_bits);
  const double rounded = std::nearbyint(std::fabs(x) / ulp) * ulp;
  return std::copysign(rounded > max_finite ? INFINITY : rounded, x);
}
double reference_round(DType t, float x) {
  if (t == DType::bf16) return reference_round(x, 7, -126, std::ldexp(255.0, 120));
  return reference_round(x, 10, -14, 65504.0);
}
// A 2-byte value from its fields, in double: (1 + m / 2^mbits) 2^(e - bias), subnormal m
// 2^(1-bias-mbits).
double reference_widen(uint16_t bits, int mantissa_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1, max_exp = (1 << exp_bits) - 1;
  const int mant = bits & ((1 << mantissa_bits) - 1), exp = (bits >> mantissa_bits) & max_exp;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exp == max_exp) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(double(mant), 1 - bias - mantissa_bits);
  return sign * std::ldexp(1.0 + std::ldexp(double(mant), -mantissa_bits), exp - bias);
}
}  // namespace

TEST_CASE("cast.h widens every bf16 and fp16 value exactly", "[precision][cast]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = uint16_t(h);
    const double bf = reference_widen(bits, 7, 8), f16 = reference_widen(bits, 10, 5);
    INFO("bits 0x" << std::hex << h);
    if (std::isnan(bf))
      REQUIRE(std::isnan(math::bf16_bits_to_f32(bits)));
    else
      REQUIRE(double(math::bf16_bits_to_f32(bits)) == bf);
    if (std::isnan(f16))
      REQUIRE(std::isnan(math::f16_bits_to_f32(bits)));
    else
      REQUIRE(double(math::f16_bits_to_f32(bits)) == f16);
    REQUIRE(std::bit_cast<uint32_t>(math::bits_2byte_to_f32(DType::bf16, bits)) ==
            std::bit_cast<uint32_t>(bf16_bits_to_f32(bits)));  // dtype.h's name: the same code
  }
}

TEST_CASE("cast.h rounds like a double-precision reference: ties, subnormals, overflow, NaN",
          "[precision][cast]") {
  std::mt19937 rng(7);
  std::vector<uint32_t> inputs;
  for (int i = 0; i < 1'000'000; ++i) inputs.push_back(uint32_t(rng()));  // every exponent
  // Near the decisions: exponents around each type's subnormal, normal and overflow edges, with
  // the dropped bits at the tie, one below and one above (bf16 drops 16 bits, fp16 13 or more).
  for (int exp = -30 + 127; exp <= 17 + 127; ++exp)
    for (int i = 0; i < 2000; ++i) {
      const uint32_t high = (uint32_t(exp) << 23) | (uint32_t(rng()) & 0x7FE000u);
      for (uint32_t low : {0x0u, 0xFFFu, 0x1000u, 0x1001u, 0x7FFFu, 0x8000u, 0x8001u})
        inputs.push_back(high | low | (i % 2 ? 0x80000000u : 0u));
    }
  for (int i = 0; i < 2000; ++i)  // bf16's overflow: the top fp32 exponent, past half an ulp
    inputs.push_back(0x7F7F8000u | (uint32_t(rng()) & 0x7FFFu) | (i % 2 ? 0x80000000u : 0u));
  for (uint32_t edge :
       {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x477FE000u, 0x477FEFFFu,
        0x477FF000u, 0x33000000u, 0x33000001u, 0x00000001u, 0x807FFFFFu})
    inputs.push_back(edge);
  for (DType t : {DType::bf16, DType::f16}) {
    int64_t ties = 0, subnormal = 0, overflow = 0;
    for (uint32_t in : inputs) {
      const float x = std::bit_cast<float>(in);
      const uint16_t bits = math::f32_to_2byte_bits(t, x);
      const float got = math::bits_2byte_to_f32(t, bits);
      INFO(dtype_name(t) << " of 0x" << std::hex << in << " gave 0x" << bits);
      if (std::isnan(x)) {
        REQUIRE(std::isnan(got));
        REQUIRE(std::signbit(got) == std::signbit(x));
        continue;
      }
      const double want = reference_round(t, x);
      REQUIRE(double(got) == want);
      REQUIRE(std::signbit(got) == std::signbit(x));  // -0 stays -0
      REQUIRE(math::round_to(t, x) == got);
      REQUIRE(math::store_flushed_to_zero(x, bits) == (got == 0.0f && x != 0.0f));
      REQUIRE(math::store_overflowed_to_inf(t, x, bits) == (std::isinf(got) && std::isfinite(x)));
      ties += (in & 0x1FFFu) == 0x1000u || (in & 0xFFFFu) == 0x8000u;
      const float min_normal =
          t == DType::f16 ? std::ldexp(1.0f, -14) : std::numeric_limits<float>::min();
      subnormal += got != 0.0f && std::fabs(got) < min_normal;
      overflow += std::isinf(got) && std::isfinite(x);
    }
    INFO(dtype_name(t));
    CHECK(ties > 1000);  // the sample did reach every kind of decision
    CHECK(subnormal > 1000);
    CHECK(overflow > 1000);
  }
  CHECK(math::is_nonfinite(INFINITY));
  CHECK(math::is_nonfinite(-NAN));
  CHECK_FALSE(math::is_nonfinite(std::numeric_limits<float>::max()));
  CHECK_FALSE(math::is_nonfinite(std::numeric_limits<float>::denorm_min()));
}

TEST_CASE("the CPU precision kernels: convert counts its losses, 2-byte GEMM rounds once",
          "[precision][cast]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  // bf16 -> fp16 goes through fp32: 1e-8 is a normal bf16 but below half fp16's smallest
  // subnormal (flushed), 1e5 overflows fp16, inf is not counted as an overflow (it was not finite).
  const std::vector<float> values = {1e-8f, 1e5f, INFINITY, 0.0f, 1.5f, NAN};
  std::vector<uint16_t> bf(values.size()), f16(values.size());
  cpu::convert(bf.data(), DType::bf16, values.data(), DType::f32, int64_t(values.size()));
  store_counters() = {};
  cpu::convert(f16.data(), DType::f16, bf.data(), DType::bf16, int64_t(values.size()));
  CHECK(store_counters().flushed_to_zero == 1);
  CHECK(store_counters().overflowed_to_inf == 1);
  for (size_t i = 0; i < values.size(); ++i) {
    INFO(i);
    const float via_fp32 = math::round_to(DType::f16, math::round_to(DType::bf16, values[i]));
    if (std::isnan(values[i]))
      CHECK(std::isnan(math::f16_bits_to_f32(f16[i])));
    else
      CHECK(math::f16_bits_to_f32(f16[i]) == via_fp32);
  }
  CHECK(cpu::count_nonfinite(f16.data(), DType::f16, int64_t(f16.size())) == 3);  // 1e5, inf, NaN
  CHECK(cpu::count_nonfinite(values.data(), DType::f32, int64_t(values.size())) == 2);

  // matmul_2byte equals the staged fp32 matmul of ops::matmul on bf16 CPU tensors, bit for bit.
  Tensor a = Tensor::empty({5, 7}, MemCategory::workspace, DType::bf16);
  Tensor b = Tensor::empty({3, 7}, MemCategory::workspace, DType::bf16);
  Tensor c = Tensor::empty({5, 3}, MemCategory::workspace, DType::bf16);
  std::vector<float> av(35), bv(21), cv(15);
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(float(i)) * 3.0f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(float(i));
  for (size_t i = 0; i < cv.size(); ++i) cv[i] = float(i) / 7.0f;
  a.write_f32(av.data(), 35);
  b.write_f32(bv.data(), 21);
  c.write_f32(cv.data(), 15);
  std::vector<uint16_t> direct(15);
  std::memcpy(direct.data(), c.raw(), 30);
  cpu::matmul_2byte(direct.data(), a.raw(), b.raw(), DType::bf16, 5, 3, 7, false, true, 0.5f);
  ops::matmul(c, a, b, false, true, 0.5f);
  CHECK(std::memcmp(direct.data(), c.raw(), 30) == 0);
}

namespace {
// A stand-in for a GPU, inside this process: "device" memory is host memory behind the cuda
// device hooks, and the CUDA table's entries are the CPU kernels, wrapped to count their calls.
// So the --device cuda code paths of ops and Tensor (staging through the table's convert, the
// 2-byte GEMM entry, device copies) run here exactly as they would on a GPU, and their results
// can be compared bit for bit with the CPU path. Restores the table and hooks it found.
struct HostAsCuda {
  static inline int64_t live_buffers = 0, converts = 0, gemms_2byte = 0, counts = 0;
  static void* allocate(int64_t bytes, int) {
    ++live_buffers;
    return std::calloc(size_t(bytes), 1);
  }
  static void release(void* p, int) {
    --live_buffers;
    std::free(p);
  }
  static void copy(void* dst, const void* src, int64_t bytes) {
    std::memmove(dst, src, size_t(bytes));
  }
  static void convert(void* dst, DType dt, const void* src, DType st, int64_t n) {
    ++converts;
    cpu::convert(dst, dt, src, st, n);
  }
  static int64_t count_nonfinite(const void* x, DType t, int64_t n) {
    ++counts;
    return cpu::count_nonfinite(x, t, n);
  }
  static void matmul_2byte(void* c, const void* a, const void* b, DType t, int64_t m, int64_t n,
                           int64_t k, bool ta, bool tb, float beta) {
    ++gemms_2byte;
    cpu::matmul_2byte(c, a, b, t, m, n, k, ta, tb, beta);
  }

  CudaKernels saved_table = cuda_kernels();
  DeviceMemoryHooks saved_hooks = device_memory_hooks(DeviceKind::cuda);
  HostAsCuda() {
    CudaKernels k;
    k.matmul = cpu::matmul;
    k.add = cpu::add;
    k.gelu_forward = cpu::gelu_forward;
    k.layernorm_forward = cpu::layernorm_forward;
    k.convert = convert;
    k.count_nonfinite = count_nonfinite;
    k.matmul_2byte = matmul_2byte;
    install_cuda_kernels(k);
    set_device_memory_hooks(DeviceKind::cuda, {allocate, release, copy});
  }
  ~HostAsCuda() {
    install_cuda_kernels(saved_table);
    set_device_memory_hooks(DeviceKind::cuda, saved_hooks);
  }
  HostAsCuda(const HostAsCuda&) = delete;
  HostAsCuda& operator=(const HostAsCuda&) = delete;
};

std::vector<uint16_t> bits_of(const Tensor& t) {  // a 2-byte tensor's stored bits, any device
  std::vector<uint16_t> bits(size_t(t.numel()));
  if (t.device().kind == DeviceKind::cpu)
    std::memcpy(bits.data(), t.raw(), size_t(t.bytes()));
  else
    device_memory_hooks(t.device().kind).copy(bits.data(), t.raw(), t.bytes());
  return bits;
}
}  // namespace

TEST_CASE("bf16/fp16 on --device cuda: staged through the table's convert, same bits as the CPU",
          "[precision][cast]") {
  HostAsCuda device;
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  Allocator gpu(Device::cuda(0));
  for (DType t : {DType::bf16, DType::f16}) {
    DYNAMIC_SECTION(dtype_name(t)) {
      // The same values on both devices, written through write_f32 (a cuda tensor: rounded on
      // the host, copied by the hooks).
      auto pair = [&](const Shape& shape, float scale) {
        std::vector<float> v(size_t(shape_numel(shape)));
        for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + 1.0f);
        Tensor h = Tensor::empty(shape, MemCategory::workspace, t);
        Tensor d = Tensor::empty(shape, MemCategory::workspace, t, &gpu);
        h.write_f32(v.data(), h.numel());
        d.write_f32(v.data(), d.numel());
        REQUIRE(bits_of(h) == bits_of(d));
        return std::pair{h, d};
      };
      auto [x, gx] = pair({6, 8}, 3.0f);
      auto [y, gy] = pair({6, 8}, 1e-3f);
      auto [w, gw] = pair({5, 8}, 1.0f);
      auto [out, gout] = pair({6, 8}, 0.0f);
      auto [mm, gmm] = pair({6, 5}, 2.0f);
      HostAsCuda::converts = HostAsCuda::gemms_2byte = 0;

      ops::add(out, x, y);  // staged: x, y in, out in and back
      ops::add(gout, gx, gy);
      CHECK(bits_of(gout) == bits_of(out));
      CHECK(HostAsCuda::converts == 4);
      ops::gelu_forward(gout, gout);  // in place: one staging buffer, one store
      ops::gelu_forward(out, out);
      CHECK(bits_of(gout) == bits_of(out));
      CHECK(HostAsCuda::converts == 6);

      ops::matmul(mm, x, w, false, true, 0.5f);  // three 2-byte tensors: the 2-byte GEMM entry
      ops::matmul(gmm, gx, gw, false, true, 0.5f);
      CHECK(bits_of(gmm) == bits_of(mm));
      CHECK(HostAsCuda::gemms_2byte == 1);
      CHECK(HostAsCuda::converts == 6);

      // layernorm: 2-byte activations, fp32 mean/rstd (mixed types: staged, fp32 kernel).
      Tensor mean = Tensor::empty({6}, MemCategory::workspace);
      Tensor rstd = Tensor::empty({6}, MemCategory::workspace);
      Tensor gmean = Tensor::empty({6}, MemCategory::workspace, DType::f32, &gpu);
      Tensor grstd = Tensor::empty({6}, MemCategory::workspace, DType::f32, &gpu);
      auto [lw, glw] = pair({8}, 1.0f);
      auto [lb, glb] = pair({8}, 0.1f);
      const int64_t buffers = HostAsCuda::live_buffers;  // the tensors' own
      ops::layernorm_forward(out, mean, rstd, x, lw, lb);
      ops::layernorm_forward(gout, gmean, grstd, gx, glw, glb);
      CHECK(bits_of(gout) == bits_of(out));
      CHECK(grstd.to_vector() == rstd.to_vector());
      CHECK(HostAsCuda::live_buffers == buffers);  // every staging buffer was released

      // convert and the overflow check run on the device; the store counters count the same.
      Tensor wide = Tensor::from({4}, {7e4f, 1e-9f, 0.0f, NAN});
      Tensor gwide = Tensor::empty({4}, MemCategory::workspace, DType::f32, &gpu);
      gwide.copy_from(wide);
      Tensor narrow = Tensor::empty({4}, MemCategory::workspace, t);
      Tensor gnarrow = Tensor::empty({4}, MemCategory::workspace, t, &gpu);
      store_counters() = {};
      ops::convert(narrow, wide);
      const StoreCounters on_cpu = store_counters();
      store_counters() = {};
      const int64_t converts = HostAsCuda::converts;
      ops::convert(gnarrow, gwide);
      CHECK(HostAsCuda::converts == converts + 1);
      CHECK(store_counters().flushed_to_zero == on_cpu.flushed_to_zero);
      CHECK(store_counters().unchecked == 0);  // the CPU kernels check every store they make
      CHECK(store_counters().overflowed_to_inf == on_cpu.overflowed_to_inf);
      CHECK(bits_of(gnarrow) == bits_of(narrow));
      HostAsCuda::counts = 0;
      CHECK(ops::count_nonfinite(gnarrow) == ops::count_nonfinite(narrow));
      CHECK(ops::count_nonfinite(gnarrow) == (t == DType::f16 ? 2 : 1));
      CHECK(HostAsCuda::counts == 2);

      // Host access: to_vector, read_f32 and fill of a 2-byte cuda tensor.
      const std::vector<float> read = gnarrow.to_vector();
      CHECK(std::isnan(read[3]));
      CHECK(read[1] == narrow.to_vector()[1]);
      gnarrow.fill(0.1f);
      narrow.fill(0.1f);
      CHECK(bits_of(gnarrow) == bits_of(narrow));
    }
  }
}

TEST_CASE("2-byte tensors hold 2 bytes per element and round on every store", "[precision]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  Tensor h = Tensor::empty({1000}, MemCategory::activations, DType::f16);
  CHECK(h.bytes() == 2000);
  CHECK(ctx.allocator.stats().current[int(MemCategory::activations)] == 2000);
  h.fill(0.1f);
  CHECK(h.to_vector()[7] == f16_bits_to_f32(0x2E66));

  // An op computes in fp32 and rounds its result once: 1 + 2^-9 is not a bf16 value.
  Tensor a = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  Tensor b = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  Tensor out = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  a.fill(1.0f);
  b.fill(pow2(-9));
  ops::add(out, a, b);
  CHECK(out.to_vector()[0] == 1.0f);  // 1 + 2^-9: below half a bf16 ulp (2^-8), rounds down
  b.fill(3 * pow2(-9));
  ops::add(out, a, b);
  CHECK(out.to_vector()[0] == 1.0f + pow2(-7));  // 1 + 1.5 ulp: tie, rounds to even (2 ulp)

  // fp16 overflow and underflow are counted.
  store_counters() = {};
  Tensor big = Tensor::from({3}, {7e4f, 1e-9f, 0.0f});
  Tensor small = Tensor::empty({3}, MemCategory::workspace, DType::f16);
  ops::convert(small, big);
  CHECK(std::isinf(small.to_vector()[0]));
  CHECK(small.to_vector()[1] == 0.0f);
  CHECK(store_counters().overflowed_to_inf == 1);
  CHECK(store_counters().flushed_to_zero == 1);  // the exact 0 is not counted
  CHECK(ops::count_nonfinite(small) == 1);
}

TEST_CASE("bytes per parameter from the allocator: fp32 4+4+8, bf16/fp16 2+4+12", "[precision]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    DYNAMIC_SECTION(precision_name(dtype)) {
      RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
      ScopedRank installed(ctx);
      GPTConfig cfg;
      cfg.dtype = dtype;
      GPT model(cfg);
      auto opt = optim::make_adamw(optim::whole_params(model.params()), dtype);
      const int64_t n = model.num_params();
      const MemoryStats s = ctx.allocator.stats();
      auto current = [&](MemCategory c) { return s.current[int(c)]; };
      const int64_t low = dtype == DType::f32 ? 4 : 2;
      CHECK(current(MemCategory::parameters) == low * n);
      CHECK(current(MemCategory::gradients) == 4 * n);
      CHECK(current(MemCategory::optimizer_state) == (dtype == DType::f32 ? 8 : 12) * n);
      for (Param* p : model.params()) CHECK(p->data.dtype() == dtype);
    }
  }
}

TEST_CASE("master weights: the update lands in fp32 and is rounded into the model", "[precision]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  Param p("w", {4});
  p.data = Tensor::empty({4}, MemCategory::parameters, DType::bf16);
  p.data.fill(1.0f);
  p.grad.fill(1.0f);
  optim::SGDOptions sgd{.lr = 1e-3f, .momentum = 0.0f};
  optim::MixedPrecision opt({{&p, 0, 4}}, [&](std::vector<optim::ParamSlice> s) {
    return std::make_unique<optim::SGD>(std::move(s), sgd);
  });
  for (int i = 0; i < 3; ++i) opt.step();
  // 1 - 0.003 is below half a bf16 ulp of 1 (2^-8 = 0.0039 below 1 is 2^-9): a bf16-only SGD
  // would stay at 1.0 forever; the fp32 master accumulates the updates.
  CHECK(opt.master_params()[0]->data.to_vector()[0] == Approx(0.997f).epsilon(1e-6));
  CHECK(p.data.to_vector()[0] ==
        round_to(DType::bf16, opt.master_params()[0]->data.to_vector()[0]));
  CHECK(opt.hyperparams()["master_weights"] == "fp32");
}

namespace {
// The default single-device config (2 layers, dim 64, seq 32, 150 steps of batch 16, AdamW lr
// 3e-3) in `precision`, through the one training loop.
lessons::MeasuredRun default_run(DType precision, bool loss_scaling = true) {
  lessons::CommonOptions c;
  auto task = lessons::make_task(c);
  GPTConfig cfg = lessons::model_config(c, *task);
  cfg.dtype = precision;
  return lessons::train_measured(c, cfg, *task, loss_scaling);
}
}  // namespace

TEST_CASE("bf16 and fp16 training on the default single-device config end within 0.15 of fp32",
          "[precision][train]") {
  const lessons::MeasuredRun fp32 = default_run(DType::f32);
  const lessons::MeasuredRun bf16 = default_run(DType::bf16);
  const lessons::MeasuredRun fp16 = default_run(DType::f16);
  INFO("final loss: fp32 " << fp32.losses.back() << ", bf16 " << bf16.losses.back() << ", fp16 "
                           << fp16.losses.back() << " (scale " << fp16.loss_scale << ", "
                           << fp16.skipped_steps.size() << " skipped)");
  CHECK(fp32.losses.back() < fp32.losses.front() - 0.5f);  // it did train
  // bf16 (8 mantissa bits): the bound. fp16 with loss scaling keeps 11 bits, so it must
  // meet the same bound; its loss scale keeps the gradients in range, so (unlike bf16) its
  // distance to fp32 is rounding, not lost gradients.
  CHECK(std::abs(bf16.losses.back() - fp32.losses.back()) < 0.15f);
  CHECK(std::abs(fp16.losses.back() - fp32.losses.back()) < 0.15f);
  CHECK(std::abs(fp16.losses.back() - bf16.losses.back()) < 0.15f);
  CHECK(bf16.final_params != fp32.final_params);  // and they really ran in 2 bytes
  CHECK(fp16.final_params != fp32.final_params);
  CHECK(fp16.final_params != bf16.final_params);
}

TEST_CASE("bytes per parameter from the allocator in ddp and pipeline ranks, per precision",
          "[precision][train]") {
  GPTConfig base;
  base.layers = 4;
  base.dim = 16;
  base.heads = 2;
  base.seq_len = 8;
  auto task = data::make_task("markov", 1, {.seq_len = 8});
  base.vocab = task->vocab_size();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const std::string layout_name : {"ddp", "pipeline"}) {
      DYNAMIC_SECTION(precision_name(dtype) << " " << layout_name) {
        GPTConfig cfg = base;
        cfg.dtype = dtype;
        train::OptimizerFactory adamw = [dtype](const ParamList& params) {
          return optim::make_adamw(optim::whole_params(params), dtype);
        };
        WorldOptions o;
        o.all_reduce = selected_all_reduce();
        o.ranks = 2;
        o.backend = "local";
        o.comm_timeout = 20;
        World world(o);
        train::TrainOptions t{.steps = 2, .global_batch = 8, .seq = 8};
        if (dtype == DType::f16) t.loss_scaling = train::LossScaling{};
        struct Measured {
          int64_t params = 0, weights = 0, gradients = 0, optimizer = 0;
        };
        std::vector<Measured> ranks(2);
        std::mutex mutex;
        train::train(
            world, *task, t,
            [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
              if (layout_name == "ddp")
                return parallel::ddp_layout(cfg, *ctx.comm, parallel::DdpOptions{}, 1, adamw,
                                            ctx.rank, ex::selected_seams().ddp);
              return parallel::pipeline_layout(cfg, *ctx.comm,
                                               {.schedule = "1f1b", .microbatches = 4}, adamw,
                                               mgpu::ex::selected_seams().hybrid());
            },
            {}, [&](RankContext& ctx, train::Layout& layout) {  // after training, still alive
              const MemoryStats s = ctx.allocator.stats();
              Measured m;
              for (const train::TensorShard& shard : layout.shards())
                if (shard.kind == "param") m.params += shard.local.numel();
              m.weights = s.current[int(MemCategory::parameters)];
              m.gradients = s.current[int(MemCategory::gradients)];
              m.optimizer = s.current[int(MemCategory::optimizer_state)];
              std::lock_guard lock(mutex);
              ranks[static_cast<size_t>(ctx.rank)] = m;
            });
        const int64_t low = dtype == DType::f32 ? 4 : 2;
        const int64_t state = dtype == DType::f32 ? 8 : 12;  // m, v (+ the fp32 master)
        for (const Measured& m : ranks) {
          CAPTURE(m.params, m.weights, m.gradients, m.optimizer);
          REQUIRE(m.params > 0);
          CHECK(m.weights == low * m.params);
          CHECK(m.gradients == 4 * m.params);  // fp32 gradients in every precision
          CHECK(m.optimizer == state * m.params);
        }
      }
    }
  }
}

}  // namespace test_precision

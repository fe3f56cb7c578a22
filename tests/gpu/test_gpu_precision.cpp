// bf16/fp16 on the GPU against the CPU: the convert kernel rounds bit for bit as the CPU's
// emulated storage (both run core/ops/math/cast.h), the overflow count is exact, the 2-byte GEMM
// (cuBLAS, fp32 compute) is within one ulp of the type of the CPU's staged fp32 GEMM, and a bf16
// GPT forward/backward, the fp16 loss scaler and a mixed-precision AdamW step agree with the CPU.
// Without a GPU each test WARNs "no CUDA GPU: skipped" (and gpu_main.cpp exits 77 first).
#include <bit>
#include <cstring>

#include "core/ops/cpu/precision.h"
#include "core/ops/cuda_table.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "gpu_test_util.h"

using namespace mgpu;
using gpu_test::GpuRank;
using gpu_test::require_close;

namespace {

// Relative size of one ulp at the top of the type's binade: a result rounded into the type may
// differ by one rounding from the CPU's when the fp32 sums before it differ in their last bits.
double ulp_of(DType t) {
  return t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
}

// A 2-byte tensor on the host holding `values` rounded, and its copy on the GPU (the same bits).
std::pair<Tensor, Tensor> pair_2byte(GpuRank& g, DType t, const Shape& shape,
                                     const std::vector<float>& values) {
  Tensor h = Tensor::empty(shape, MemCategory::workspace, t, &g.host);
  h.write_f32(values.data(), h.numel());
  Tensor d = Tensor::empty(shape, MemCategory::workspace, t, &g.ctx.allocator);
  d.copy_from(h);
  return {h, d};
}

std::vector<uint16_t> device_bits(const Tensor& d) {
  std::vector<uint16_t> bits(size_t(d.numel()));
  device_memory_hooks(DeviceKind::cuda).copy(bits.data(), d.raw(), d.bytes());
  return bits;
}

std::vector<uint16_t> host_bits(const Tensor& h) {
  std::vector<uint16_t> bits(size_t(h.numel()));
  std::memcpy(bits.data(), h.raw(), size_t(h.bytes()));
  return bits;
}

}  // namespace

TEST_CASE("gpu convert rounds every value as the CPU does, bit for bit", "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  // Random fp32 bit patterns: every exponent, so ties, subnormals, overflow, inf and NaN.
  std::mt19937 rng(11);
  const int64_t n = 1 << 20;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = std::bit_cast<float>(uint32_t(rng()));
  Tensor wide = g.gpu(g.cpu({n}, values));
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(dtype_name(t));
    std::vector<uint16_t> want(static_cast<size_t>(n));
    cpu::convert(want.data(), t, values.data(), DType::f32, n);
    Tensor narrow = Tensor::empty({n}, MemCategory::workspace, t, &g.ctx.allocator);
    const int64_t unchecked = store_counters().unchecked;
    ops::convert(narrow, wide);
    CHECK(device_bits(narrow) == want);
    CHECK(store_counters().unchecked == unchecked + n);  // said, not silently uncounted
    // and back: widening is exact on both sides (NaN payloads included).
    Tensor back = Tensor::empty({n}, MemCategory::workspace, DType::f32, &g.ctx.allocator);
    ops::convert(back, narrow);
    std::vector<float> widened(static_cast<size_t>(n));
    cpu::convert(widened.data(), DType::f32, want.data(), t, n);
    const std::vector<float> got = back.to_vector();
    CHECK(std::memcmp(got.data(), widened.data(), size_t(n) * sizeof(float)) == 0);
    CHECK(ops::count_nonfinite(narrow) == cpu::count_nonfinite(want.data(), t, n));
  }
  // bf16 -> fp16 directly on the device: through fp32, as the CPU does.
  Tensor bf = Tensor::empty({n}, MemCategory::workspace, DType::bf16, &g.ctx.allocator);
  Tensor half = Tensor::empty({n}, MemCategory::workspace, DType::f16, &g.ctx.allocator);
  ops::convert(bf, wide);
  ops::convert(half, bf);
  std::vector<uint16_t> want(static_cast<size_t>(n));
  cpu::convert(want.data(), DType::f16, device_bits(bf).data(), DType::bf16, n);
  CHECK(device_bits(half) == want);
}

TEST_CASE("gpu count_nonfinite counts exactly, on fp32 and 2-byte tensors", "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t n = 3 * 65536 + 17;  // several blocks and a ragged end
  std::vector<float> values(size_t(n), 1.0f);
  for (int64_t i = 5; i < n; i += 977) values[size_t(i)] = (i % 2) ? INFINITY : NAN;
  values[size_t(n - 1)] = -INFINITY;
  const int64_t want = cpu::count_nonfinite(values.data(), DType::f32, n);
  REQUIRE(want > 100);
  Tensor x = g.gpu(g.cpu({n}, values));
  CHECK(ops::count_nonfinite(x) == want);
  auto [h, d] = pair_2byte(g, DType::f16, {n}, values);
  CHECK(ops::count_nonfinite(d) == want);
  CHECK(ops::count_nonfinite(h) == want);
}

TEST_CASE("gpu 2-byte matmul is within one ulp of the CPU's, all transposes, with beta",
          "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t m = 37, n = 53, k = 29;  // odd sizes: catch leading-dimension mistakes
  for (DType t : {DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(dtype_name(t) << " trans_a " << ta << " trans_b " << tb);
        auto [a, ga] =
            pair_2byte(g, t, ta ? Shape{k, m} : Shape{m, k}, GpuRank::randn(m * k, 1, 1));
        auto [b, gb] =
            pair_2byte(g, t, tb ? Shape{n, k} : Shape{k, n}, GpuRank::randn(k * n, 2, 1));
        auto [c, gc] = pair_2byte(g, t, {m, n}, GpuRank::randn(m * n, 3, 1));
        ops::matmul(c, a, b, ta, tb, 0.5f);
        ops::matmul(gc, ga, gb, ta, tb, 0.5f);
        require_close(gc, c, "matmul_2byte", ulp_of(t));
      }
}

TEST_CASE("gpu staged 2-byte ops agree with the CPU within one rounding", "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t n = 67, c = 300;
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(dtype_name(t));
    auto [x, gx] = pair_2byte(g, t, {n, c}, GpuRank::randn(n * c, 4, 1));
    auto [y, gy] = pair_2byte(g, t, {n, c}, GpuRank::randn(n * c, 5, 1));
    auto [out, gout] = pair_2byte(g, t, {n, c}, std::vector<float>(size_t(n * c), 0.0f));
    ops::add(out, x, y);
    ops::add(gout, gx, gy);
    CHECK(device_bits(gout) == host_bits(out));  // one fp32 add, rounded once: the same bits
    ops::gelu_forward(out, out);                 // in place: staged once, stored once
    ops::gelu_forward(gout, gout);
    require_close(gout, out, "gelu_forward", ulp_of(t));
    Tensor mean = g.cpu_zeros({n}), rstd = g.cpu_zeros({n});
    Tensor gmean = g.gpu(mean), grstd = g.gpu(rstd);
    auto [w, gw] = pair_2byte(g, t, {c}, GpuRank::randn(c, 6, 1));
    auto [bias, gbias] = pair_2byte(g, t, {c}, GpuRank::randn(c, 7, 0.1f));
    ops::layernorm_forward(out, mean, rstd, x, w, bias);
    ops::layernorm_forward(gout, gmean, grstd, gx, gw, gbias);
    require_close(gout, out, "layernorm_forward", ulp_of(t));
    require_close(grstd, rstd, "layernorm rstd (fp32)");
  }
}

TEST_CASE("a bf16 GPT forward/backward on the GPU matches the CPU within bf16 rounding",
          "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  // Activations are stored in bf16 (8 significant bits) on both sides; where the fp32 sums
  // before a store differ in their last bits, the stores round apart by one bf16 ulp and the
  // difference travels through the layers: the loss within 1%, gradients within 5% of the
  // largest (fp32 runs agree to 1e-4 and 1e-3: test_gpu_ops.cpp).
  gpu_test::require_gpt_matches_cpu(gpu_test::small_gpt_config(DType::bf16), /*batch=*/3,
                                    /*seed=*/30, /*loss_rel=*/1e-2, /*grad_rel=*/5e-2);
}

TEST_CASE("gpu mixed precision: the fp16 loss scaler sees an inf, AdamW steps the fp32 masters",
          "[gpu][precision]") {
  MGPU_REQUIRE_GPU();
  auto make_param = [](Allocator* alloc) {  // fp16 weights of 0.5, fp32 gradients of 1e-3
    auto p = std::make_unique<Param>("w", Shape{1000});
    p->data = Tensor::empty({1000}, MemCategory::parameters, DType::f16, alloc);
    p->grad = Tensor::empty({1000}, MemCategory::gradients, DType::f32, alloc);
    p->data.fill(0.5f);
    p->grad.fill(1e-3f);
    return p;
  };
  // The CPU side first, on this thread's default CPU rank (its masters are CPU tensors).
  auto cpu_param = make_param(nullptr);
  auto cpu_opt = optim::make_adamw({{cpu_param.get(), 0, 1000}}, DType::f16);
  for (int i = 0; i < 3; ++i) cpu_opt->step();

  GpuRank g;  // from here on, new tensors (the GPU optimizer's masters too) live on cuda:0
  auto gpu_param = make_param(&g.ctx.allocator);
  REQUIRE(gpu_param->data.device().kind == DeviceKind::cuda);
  CHECK_FALSE(optim::LossScaler::found_inf({{gpu_param.get(), 0, 1000}}, {}));
  auto gpu_opt = optim::make_adamw({{gpu_param.get(), 0, 1000}}, DType::f16);
  for (int i = 0; i < 3; ++i) gpu_opt->step();
  require_close(gpu_param->data, cpu_param->data, "fp16 weights after 3 AdamW steps",
                ulp_of(DType::f16));
  auto* gpu_mixed = gpu_opt->mixed_precision();
  auto* cpu_mixed = cpu_opt->mixed_precision();
  REQUIRE(gpu_mixed);
  REQUIRE(gpu_mixed->master_params()[0]->data.device().kind == DeviceKind::cuda);
  require_close(gpu_mixed->master_params()[0]->data, cpu_mixed->master_params()[0]->data,
                "fp32 masters");

  // An inf in one gradient: the device count sees it, so the scaler would skip the step.
  std::vector<float> grads(1000, 1e-3f);
  grads[999] = INFINITY;
  gpu_param->grad.copy_from(g.cpu({1000}, grads));
  CHECK(optim::LossScaler::found_inf({{gpu_param.get(), 0, 1000}}, {}));
}

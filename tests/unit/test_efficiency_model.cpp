// The hardware profile's efficiency model: GEMMs lose to tile and wave quantisation on the SM
// count under a per-dtype ceiling, streaming kernels run at the achieved HBM bandwidth, attention
// is materialised or fused, links run at their achieved bus bandwidth, and compute under a
// collective in flight is slowed. Defaults are the datasheet, so old profile files keep meaning.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/runtime/context.h"

namespace test_efficiency_model {

using namespace mgpu;

namespace {
HardwareProfile gpu_like() {
  HardwareProfile p = HardwareProfile::ideal(0);
  p.peak_flops = 100e12;
  p.mem_bandwidth = 1e12;
  return p;
}

KernelCost gemm(double m, double n, double k) {
  return {.kind = KernelKind::gemm,
          .flops = 2 * m * n * k,
          .bytes = 0,
          .dtype = DType::f32,
          .m = m,
          .n = n,
          .k = k};
}
}  // namespace

TEST_CASE("without an efficiency model a GEMM runs at the datasheet peak", "[runtime][clock]") {
  const HardwareProfile p = gpu_like();
  CHECK(p.gemm_efficiency(100, 100, 1, DType::f32) == 1.0);
  CHECK(p.kernel_time(gemm(1000, 1000, 1000)) == Approx(2e9 / 100e12));
  CHECK(p.kernel_time(0, 1e9) == Approx(1e-3));  // a streaming kernel at the full bandwidth
}

TEST_CASE("tile quantisation: a partial tile costs a whole one", "[runtime][clock]") {
  HardwareProfile p = gpu_like();
  p.efficiency.gemm_tiles = {{128, 128}};
  CHECK(p.gemm_efficiency(128, 128, 1, DType::f32) == 1.0);
  // 129 rows need two row tiles: 129 of 256 rows are useful.
  CHECK(p.gemm_efficiency(129, 128, 1, DType::f32) == Approx(129.0 / 256));
  CHECK(p.kernel_time(gemm(129, 128, 4096)) ==
        Approx(p.kernel_time(gemm(256, 128, 4096))));  // the same time as the full tiles
}

TEST_CASE("wave quantisation: one tile more than the SMs costs a second wave", "[runtime][clock]") {
  HardwareProfile p = gpu_like();
  p.efficiency.sm_count = 108;
  p.efficiency.gemm_tiles = {{128, 128}};
  // 108 tiles fill one wave; 109 need two waves, the second with one busy SM.
  CHECK(p.gemm_efficiency(108 * 128, 128, 1, DType::f32) == 1.0);
  CHECK(p.gemm_efficiency(109 * 128, 128, 1, DType::f32) == Approx(109.0 / 216));
  CHECK(p.kernel_time(gemm(109 * 128, 128, 4096)) ==
        Approx(2 * p.kernel_time(gemm(108 * 128, 128, 4096))));
  // A small GEMM (one tile) uses one SM of 108: far less efficient than a large one.
  CHECK(p.gemm_efficiency(128, 128, 1, DType::f32) == Approx(1.0 / 108));
  // cuBLAS picks the best of several tiles: smaller tiles fill the last wave better.
  // 216 tiles of 128 rows are two full waves; the best of several tiles is taken.
  CHECK(p.gemm_efficiency(216 * 128 + 128, 128, 1, DType::f32) == Approx(217.0 / 324));
  p.efficiency.gemm_tiles = {{128, 128}, {64, 128}};
  CHECK(p.gemm_efficiency(216 * 128 + 128, 128, 1, DType::f32) == Approx(434.0 / 540));
}

TEST_CASE("each dtype's GEMM ceiling and the achieved HBM bandwidth scale the roofline",
          "[runtime][clock]") {
  HardwareProfile p = gpu_like();
  p.peak_flops_bf16 = 200e12;
  p.efficiency.gemm_fp32 = 0.5;
  p.efficiency.gemm_half = 0.8;
  p.efficiency.hbm = 0.8;
  CHECK(p.kernel_time(gemm(1000, 1000, 1000)) == Approx(2e9 / (0.5 * 100e12)));
  KernelCost half = gemm(1000, 1000, 1000);
  half.dtype = DType::bf16;
  CHECK(p.kernel_time(half) == Approx(2e9 / (0.8 * 200e12)));
  CHECK(p.kernel_time(0, 1e9) == Approx(1e-3 / 0.8));
}

TEST_CASE("attention: materialised pays its passes over the scores, fused does not",
          "[runtime][clock]") {
  HardwareProfile p = gpu_like();
  const double pairs = 8.0 * 2048 * 2048;  // 8 (batch x heads) of 2048 x 2048 scores
  KernelCost attention{.kind = KernelKind::attention,
                       .flops = pairs * 4 * 128,
                       .bytes = 0,
                       .dtype = DType::f32,
                       .m = 2048,
                       .n = 2048,
                       .k = 128,
                       .batch = 8,
                       .score_bytes = pairs * 4,
                       .score_passes = 4};
  const double math = attention.flops / 100e12;
  CHECK(p.kernel_time(attention) == Approx(math + 4 * pairs * 4 / 1e12));
  p.efficiency.fused_attention = true;
  p.efficiency.flash_fraction = 0.5;
  CHECK(p.kernel_time(attention) == Approx(math / 0.5));
}

TEST_CASE("links run at their achieved bandwidth; latency sets the small-message regime",
          "[runtime][clock]") {
  HardwareProfile p = gpu_like();
  p.ranks_per_node = 8;
  p.intra_node = {"link", 100e9, 5e-6, 0.8};
  CHECK(p.transfer_time(0, 1, 80e9) == Approx(5e-6 + 1.0));
  CHECK(p.transfer_time(0, 1, 8) == Approx(5e-6 + 1e-10));  // latency-bound
}

TEST_CASE("compute overlapping a collective in flight is slowed by the profile's factor",
          "[runtime][clock]") {
  HardwareProfile p = HardwareProfile::ideal(0);
  p.peak_flops = 1e12;
  p.efficiency.overlap_slowdown = 1.0;  // twice as slow while the comm lane is busy
  RankContext ctx(0, 1, Device::cpu(), p, ClockKind::modeled);
  ScopedRank g(ctx);
  ctx.clock.wait_comm_until(0.05);           // a collective runs until t = 50 ms
  { KernelScope k("under_comm", 1e11, 0); }  // 100 ms alone: 25 ms of work done by t = 50 ms
  CHECK(ctx.clock.compute_now() == Approx(0.05 + 0.075));
  { KernelScope k("after_comm", 1e11, 0); }  // the comm lane is idle now: full speed
  CHECK(ctx.clock.compute_now() == Approx(0.125 + 0.1));
}

TEST_CASE("the efficiency model round-trips through the profile JSON, checked",
          "[runtime][clock]") {
  const HardwareProfile a100 = HardwareProfile::load("DGX-A100");
  CHECK(a100.efficiency.sm_count == 108);
  CHECK(a100.peak_label == "TF32 dense tensor core");
  CHECK(a100.efficiency.gemm_half < 1.0);
  CHECK(a100.intra_node.efficiency < 1.0);
  const HardwareProfile back = HardwareProfile::from_json(a100.to_json());
  CHECK(back.efficiency.gemm_tiles == a100.efficiency.gemm_tiles);
  CHECK(back.efficiency.gemm_half == a100.efficiency.gemm_half);
  CHECK(back.efficiency.hbm == a100.efficiency.hbm);
  CHECK(back.intra_node.efficiency == a100.intra_node.efficiency);
  CHECK(back.peak_label_half == a100.peak_label_half);
  CHECK(back.kernel_time(gemm(1000, 3000, 500)) == a100.kernel_time(gemm(1000, 3000, 500)));

  // A file without "efficiency" is the datasheet.
  nlohmann::json j = a100.to_json();
  j.erase("efficiency");
  CHECK(HardwareProfile::from_json(j).efficiency.gemm_half == 1.0);
  // Bad factors: one clear line each.
  j["efficiency"] = {{"gemm_half", 1.5}};
  CHECK_THROWS_WITH(HardwareProfile::from_json(j),
                    Catch::Contains("efficiency.gemm_half must be >= 0.001 and at most 1"));
  j["efficiency"] = {{"gemm_tiles", {{128, 0}}}};
  CHECK_THROWS_WITH(HardwareProfile::from_json(j), Catch::Contains("[rows, columns]"));
  j["efficiency"] = {{"fused_attention", "yes"}};
  CHECK_THROWS_WITH(HardwareProfile::from_json(j), Catch::Contains("true or false"));
}

TEST_CASE(
    "the lessons' slow-link profile computes exactly as the H100 preset; only its link differs",
    "[runtime][clock]") {
  // docs/lessons/slow-1GBps.json is the 8xH100-NVLink node with a 1 GB/s link: without the
  // preset's efficiency block its kernels ran at the datasheet peak, faster than the preset.
  const HardwareProfile slow =
      HardwareProfile::load(std::string(MGPU_SOURCE_DIR) + "/docs/lessons/slow-1GBps.json");
  const HardwareProfile h100 = HardwareProfile::load("8xH100-NVLink");
  for (const KernelCost& k :
       {gemm(4096, 4096, 4096), gemm(100, 300, 64),
        KernelCost{.kind = KernelKind::streaming, .flops = 1e6, .bytes = 1e9}})
    for (DType t : {DType::f32, DType::bf16}) {
      KernelCost typed = k;
      typed.dtype = t;
      CHECK(slow.kernel_time(typed) == h100.kernel_time(typed));
    }
  CHECK(slow.intra_node.achieved_bandwidth() == 1e9);
}

}  // namespace test_efficiency_model

// HardwareProfile's roofline: which link joins two ranks, and what a kernel or a transfer costs
// (tile and wave quantisation, the GEMM ceiling, materialised or fused attention).
#include "core/runtime/profile.h"

#include <algorithm>
#include <cmath>

namespace mgpu {

const LinkSpec& HardwareProfile::link(int a, int b) const {
  int per_node = ranks_per_node > 0 ? ranks_per_node : 1;
  return a / per_node == b / per_node ? intra_node : inter_node;
}

double HardwareProfile::peak_for(DType t) const {
  const double half = t == DType::bf16 ? peak_flops_bf16 : t == DType::f16 ? peak_flops_fp16 : 0;
  return half > 0 ? half : peak_flops;
}

namespace {
bool two_byte(DType t) {
  return t == DType::bf16 || t == DType::f16;
}
}  // namespace

double HardwareProfile::gemm_efficiency(double m, double n, double batch, DType dtype) const {
  const Efficiency& e = efficiency;
  const double ceiling = two_byte(dtype) ? e.gemm_half : e.gemm_fp32;
  if (e.gemm_tiles.empty() || m <= 0 || n <= 0) return ceiling;
  double best = 0;
  for (const auto& [tile_m, tile_n] : e.gemm_tiles) {
    const double tiles_m = std::ceil(m / tile_m), tiles_n = std::ceil(n / tile_n);
    // Tile quantisation: the padded tiles compute as much as full ones.
    const double tile = m * n / (tiles_m * tile_m * tiles_n * tile_n);
    // Wave quantisation: the last wave of thread blocks leaves SMs idle.
    const double blocks = tiles_m * tiles_n * std::max(1.0, batch);
    const double wave =
        e.sm_count > 0 ? blocks / (std::ceil(blocks / e.sm_count) * e.sm_count) : 1.0;
    best = std::max(best, tile * wave);
  }
  return ceiling * best;
}

double HardwareProfile::kernel_time(double flops, double bytes, DType dtype) const {
  KernelCost cost;
  cost.flops = flops;
  cost.bytes = bytes;
  cost.dtype = dtype;
  return kernel_time(cost);
}

double HardwareProfile::kernel_time(const KernelCost& c) const {
  const double peak = peak_for(c.dtype);
  const double bandwidth = mem_bandwidth * efficiency.hbm;
  const double memory = bandwidth > 0 ? c.bytes / bandwidth : 0;
  if (c.kind == KernelKind::streaming) {
    const double ceiling = two_byte(c.dtype) ? efficiency.gemm_half : efficiency.gemm_fp32;
    const double math = peak > 0 ? c.flops / (peak * ceiling) : 0;
    return launch_overhead + std::max(math, memory);
  }
  const double achieved = peak * gemm_efficiency(c.m, c.n, c.batch, c.dtype);
  if (c.kind == KernelKind::gemm)
    return launch_overhead + std::max(peak > 0 ? c.flops / achieved : 0, memory);
  // Attention. Fused: one kernel, scores on chip. Materialised: its GEMMs, then every pass over
  // the scores through HBM, one launch each (they depend on each other, so they add up).
  if (efficiency.fused_attention)
    return launch_overhead +
           std::max(peak > 0 ? c.flops / (achieved * efficiency.flash_fraction) : 0, memory);
  const double passes = bandwidth > 0 ? c.score_passes * c.score_bytes / bandwidth : 0;
  return (2 + c.score_passes) * launch_overhead + (peak > 0 ? c.flops / achieved : 0) + passes;
}

double HardwareProfile::transfer_time(int a, int b, double bytes) const {
  const LinkSpec& l = link(a, b);
  const double bandwidth = l.achieved_bandwidth();
  return l.latency + (bandwidth > 0 ? bytes / bandwidth * faults.link_factor(a, b) : 0);
}

}  // namespace mgpu

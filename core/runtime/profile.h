// HardwareProfile: the numbers the modeled clock turns work into time. A profile describes one
// device (peak FLOP/s, memory bandwidth, launch overhead, capacity) and the links between
// devices (within a node, between nodes). Presets ship; users can write the same JSON.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/runtime/dtype.h"
#include "core/runtime/faults.h"

namespace mgpu {

struct LinkSpec {
  std::string name;      // "NVLink4", "PCIe4 x16", "InfiniBand NDR 400G", ...
  double bandwidth = 0;  // bytes/s in one direction, per device (datasheet); 0 = unbounded
  double latency = 0;    // seconds per message (alpha): what sets the small-message regime
  // Achieved fraction of `bandwidth` once messages are large (NCCL's bus bandwidth over the
  // nominal one): protocol overhead, not latency. 1 = the datasheet figure.
  double efficiency = 1;
  double achieved_bandwidth() const { return bandwidth * efficiency; }
};

// The efficiency model: how far below the datasheet peaks real kernels run. Every factor is a
// named field of the profile JSON ("efficiency": {...}); the defaults are the datasheet itself
// (every factor 1, no quantisation, materialised attention), so a profile file written before
// this model existed keeps its meaning. docs/clock.md gives each preset factor's source.
struct Efficiency {
  // GEMM tile and wave quantisation (NVIDIA, "Matrix Multiplication Background User's Guide"):
  // an M x N output is cut into tiles of tile_m x tile_n, one thread block each, run in waves of
  // sm_count blocks; a partial tile or a partial last wave still costs a whole one. cuBLAS picks
  // among several tile shapes, so the best of `gemm_tiles` is taken. 0 SMs / no tiles = none.
  int sm_count = 0;
  std::vector<std::pair<int, int>> gemm_tiles;
  // Achieved fraction of the dtype's peak by a large, well-shaped GEMM (the ceiling the
  // quantisation factors multiply): fp32 (TF32 tensor cores) and the 2-byte types.
  double gemm_fp32 = 1;
  double gemm_half = 1;
  // Achieved fraction of mem_bandwidth by streaming kernels (layernorm, GELU, softmax, casts,
  // the optimizer): what a large device-to-device copy reaches.
  double hbm = 1;
  // Attention: false = materialised (the T x T scores written to HBM and read back by softmax
  // and the second GEMM, as Megatron-LM 2022 ran it); true = fused (FlashAttention: scores stay
  // on chip; its FLOPs at flash_fraction of the GEMM ceiling).
  bool fused_attention = false;
  double flash_fraction = 1;
  // Compute that runs while a collective is in flight on the same GPU is slowed by this
  // fraction (the collective's kernels take SMs and memory bandwidth).
  double overlap_slowdown = 0;
};

// What one kernel does, for its price. GEMMs carry their shape (quantisation depends on it);
// attention carries its per-head GEMM shape and the bytes of one pass over its T x T scores.
enum class KernelKind : uint8_t { streaming, gemm, attention };
struct KernelCost {
  KernelKind kind = KernelKind::streaming;
  double flops = 0;
  double bytes = 0;  // at each tensor's element size (2-byte types move half as much)
  DType dtype = DType::f32;
  double m = 0, n = 0, k = 0, batch = 1;  // gemm / attention: batch x [m, k] @ [k, n]
  double score_bytes = 0;                 // attention: one pass over the scores
  int score_passes = 0;  // attention, materialised: passes over the scores through HBM
};

struct HardwareProfile {
  std::string name;  // "8xH100-NVLink"
  std::string description;
  double peak_flops = 0;  // FLOP/s per device for fp32 training (TF32 tensor cores); 0 = unbounded
  double mem_bandwidth = 0;     // bytes/s per device; 0 = unbounded
  double launch_overhead = 0;   // seconds added to every kernel
  int64_t memory_capacity = 0;  // bytes per device; 0 = unlimited
  int ranks_per_node = 8;
  LinkSpec intra_node;  // between ranks of one node
  LinkSpec inter_node;  // between nodes
  // Dense tensor-core FLOP/s of the 2-byte types; 0 = same as peak_flops (JSON
  // "peak_TFLOPs_bf16"/"peak_TFLOPs_fp16", optional: files without them keep working).
  double peak_flops_bf16 = 0;
  double peak_flops_fp16 = 0;
  // The datasheet line each peak is ("TF32 dense tensor core", "BF16 dense tensor core"), shown
  // beside the figure so nobody mistakes a TF32 peak for FP32 or a sparse one for dense.
  std::string peak_label = "fp32";
  std::string peak_label_half = "bf16/fp16";
  Efficiency efficiency;  // defaults: the datasheet (every factor 1)
  // Injected faults (--slow-rank, --slow-link, --jitter, --fail-rank): not part of the JSON.
  FaultPlan faults;

  // The link a message from rank a to rank b crosses.
  const LinkSpec& link(int a, int b) const;
  // The peak FLOP/s a kernel computing in `t` gets.
  double peak_for(DType t) const;
  // Roofline time of one streaming kernel: launch + max(flops / (peak_for(dtype) x the GEMM
  // ceiling), bytes / (bandwidth x hbm)). Bytes are counted by the caller at each tensor's
  // element size, so 2-byte types move half as much.
  double kernel_time(double flops, double bytes, DType dtype = DType::f32) const;
  // Any kernel: a GEMM's math at gemm_efficiency of its shape; materialised attention's GEMMs
  // plus its passes over the scores at the achieved HBM bandwidth; the rest as above.
  double kernel_time(const KernelCost& cost) const;
  // Achieved fraction of peak_for(dtype) of batch x [m,k] @ [k,n]: the dtype's ceiling x tile
  // quantisation x wave quantisation (the best over gemm_tiles).
  double gemm_efficiency(double m, double n, double batch, DType dtype) const;
  // alpha + bytes / achieved bandwidth over link(a, b) (divided by an injected slow link's F).
  double transfer_time(int a, int b, double bytes) const;

  nlohmann::json to_json() const;
  static HardwareProfile from_json(const nlohmann::json& j);  // throws std::invalid_argument

  // A preset name ("8xH100-NVLink", ...) or a path to a JSON file; throws std::invalid_argument
  // naming the presets when neither matches.
  static HardwareProfile load(const std::string& name_or_path);
  static std::vector<std::string> preset_names();
  // Free compute and links: every kernel costs `kernel_seconds`, every message 0. Tests use it to
  // check schedule formulas exactly.
  static HardwareProfile ideal(double kernel_seconds = 1e-3);
};

}  // namespace mgpu

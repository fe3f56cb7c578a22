// HardwareProfile: the numbers the modeled clock turns work into time. A profile describes one
// device (peak FLOP/s, memory bandwidth, launch overhead, capacity) and the links between
// devices (within a node, between nodes). Presets ship; users can write the same JSON.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor/dtype.h"

namespace mgpu {

struct LinkSpec {
  std::string name;      // "NVLink4", "PCIe4 x16", "InfiniBand NDR 400G", ...
  double bandwidth = 0;  // bytes/s in one direction, per device; 0 = unbounded
  double latency = 0;    // seconds per message (alpha)
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

  // The link a message from rank a to rank b crosses.
  const LinkSpec& link(int a, int b) const;
  // The peak FLOP/s a kernel computing in `t` gets.
  double peak_for(DType t) const;
  // Roofline time of one kernel: launch + max(flops / peak_for(dtype), bytes / bandwidth). Bytes
  // are counted by the caller at each tensor's element size, so 2-byte types move half as much.
  double kernel_time(double flops, double bytes, DType dtype = DType::f32) const;
  // alpha + bytes / bandwidth over link(a, b).
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

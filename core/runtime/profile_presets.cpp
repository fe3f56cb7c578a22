// The built-in hardware profiles (datasheet figures and the efficiency model fitted to published
// runs), and HardwareProfile::load: a preset by name, or a JSON file.
#include "core/runtime/profile.h"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/runtime/input_file.h"
#include "core/runtime/profile_internal.h"

namespace mgpu {

using profile_detail::GiB;

namespace {
// ---- the efficiency model of the GPU presets (docs/clock.md: each factor's source; README:
// which were fitted to which published figures by `mgpu validate`).
// Streaming kernels reach this share of the HBM datasheet bandwidth (a large device-to-device
// copy on A100/H100 measures 80-90% of it).
constexpr double kHbmEfficiency = 0.85;
// A large bf16 GEMM's share of the dense tensor-core peak: fitted to Korthikanti et al. 2022,
// Table 4 (one 22B layer on A100, baseline forward 7.7 ms and backward 11.9 ms: the 0.01 step
// with the smallest larger error of the two). TF32 GEMMs get the same share.
constexpr double kGemmCeiling = 0.75;
// FlashAttention-2 runs its forward/backward at about 70% of a plain GEMM's rate on A100/H100
// (Dao 2023, fig. 4-7: 50-73% of peak where GEMMs reach 70-80%).
constexpr double kFlashFraction = 0.7;
// NCCL's all-reduce bus bandwidth over the link's datasheet figure for large messages: DGX A100
// ~230 of 300 GB/s, DGX H100 ~360 of 450 GB/s over NVLink (nccl-tests); InfiniBand ~90%.
constexpr double kNvlinkBusEfficiency = 0.77;
constexpr double kInfinibandBusEfficiency = 0.9;
constexpr double kPcieBusEfficiency = 0.8;
// Compute overlapping a collective runs this much slower (NCCL's kernels occupy SMs and HBM
// bandwidth). 0 in the presets: no published figure `mgpu validate` re-runs overlaps
// communication with compute, so no value of it is checked; a profile file can set it.
constexpr double kOverlapSlowdown = 0;

// The GPU presets' SM counts (A100 108, H100 SXM 132, RTX 4090 128) and cuBLAS's common tile
// shapes; the laptop CPU keeps the datasheet model (it is checked by `mgpu calibrate --device
// cpu`, not by published runs).
void apply_efficiency_model(HardwareProfile& p) {
  const bool h100 = p.name.find("H100") != std::string::npos;
  const bool a100 = p.name.find("A100") != std::string::npos;
  const bool rtx = p.name.find("RTX4090") != std::string::npos;
  if (!(h100 || a100 || rtx)) return;
  Efficiency& e = p.efficiency;
  e.sm_count = h100 ? 132 : a100 ? 108 : 128;
  e.gemm_tiles = {{256, 128}, {128, 128}, {128, 64}};
  e.gemm_fp32 = e.gemm_half = kGemmCeiling;
  e.hbm = kHbmEfficiency;
  e.flash_fraction = kFlashFraction;
  e.overlap_slowdown = kOverlapSlowdown;
  p.peak_label = "TF32 dense tensor core";
  p.peak_label_half = "BF16/FP16 dense tensor core";
}

// Figures are public datasheet numbers (dense tensor-core math at the fp32/TF32 training rate,
// HBM bandwidth, per-direction link bandwidth); latencies are typical small-message values.
std::vector<HardwareProfile> presets() {
  LinkSpec nvlink4{"NVLink 4 (NVSwitch)", 450e9, 2e-6};
  LinkSpec ib400{"InfiniBand NDR 400G", 50e9, 5e-6};
  LinkSpec pcie4{"PCIe 4.0 x16", 25e9, 5e-6};
  LinkSpec pcie4_host{"PCIe 4.0 x16 via host (no P2P)", 12e9, 10e-6};
  LinkSpec shm{"shared memory", 20e9, 1e-6};
  LinkSpec ether{"10G Ethernet", 1.25e9, 30e-6};
  // DGX nodes (NVIDIA DGX H100 / DGX A100 datasheets; H100 SXM5 and A100 SXM4 80GB product
  // briefs): 8 GPUs per node on NVSwitch, one InfiniBand NIC per GPU between nodes. Per GPU: H100
  // SXM 494.7 TFLOP/s dense TF32, 989.4 bf16/fp16, 3.35 TB/s HBM3, NVLink 4 900 GB/s (450 each
  // way), ConnectX-7 NDR 400 Gb/s (50 GB/s); A100 SXM 156 TF32, 312 bf16/fp16, 2.039 TB/s HBM2e,
  // NVLink 3 600 GB/s (300 each way), ConnectX-6 HDR 200 Gb/s (25 GB/s). A profile describes one
  // node type: a run of N ranks spans N / 8 nodes (ranks_per_node), as many as the world needs.
  LinkSpec nvlink3{"NVLink 3 (NVSwitch)", 300e9, 2e-6};
  LinkSpec ib200{"InfiniBand HDR 200G", 25e9, 5e-6};
  for (LinkSpec* l : {&nvlink4, &nvlink3}) l->efficiency = kNvlinkBusEfficiency;
  for (LinkSpec* l : {&ib400, &ib200}) l->efficiency = kInfinibandBusEfficiency;
  for (LinkSpec* l : {&pcie4, &pcie4_host}) l->efficiency = kPcieBusEfficiency;
  std::vector<HardwareProfile> list = {
      {"8xH100-NVLink", "8x H100 SXM 80GB in one node, NVSwitch", 495e12, 3.35e12, 3e-6, 80 * GiB,
       8, nvlink4, ib400},
      {"2x8xH100-IB", "2 nodes x 8 H100 SXM, NVLink inside, 400G InfiniBand between", 495e12,
       3.35e12, 3e-6, 80 * GiB, 8, nvlink4, ib400},
      {"4xA100-PCIe", "4x A100 80GB PCIe in one node", 156e12, 1.94e12, 4e-6, 80 * GiB, 4, pcie4,
       ib400},
      {"2xRTX4090-PCIe", "2x RTX 4090 24GB, PCIe without peer-to-peer", 82.6e12, 1.0e12, 4e-6,
       24 * GiB, 2, pcie4_host, ether},
      {"laptop-cpu", "a laptop CPU running the virtual GPUs", 0.2e12, 50e9, 1e-6, 16 * GiB, 64, shm,
       ether},
      {"DGX-H100",
       "DGX H100 nodes: 8x H100 SXM 80GB on NVSwitch, 400G InfiniBand per GPU; one node per 8 GPUs",
       494.7e12, 3.35e12, 3e-6, 80 * GiB, 8, nvlink4, ib400},
      {"DGX-A100",
       "DGX A100 nodes: 8x A100 SXM 80GB on NVSwitch, 200G InfiniBand per GPU; one node per 8 GPUs",
       156e12, 2.039e12, 4e-6, 80 * GiB, 8, nvlink3, ib200},
  };
  // Dense bf16/fp16 tensor-core peaks (fp32 accumulate): H100 SXM 989, A100 312, RTX 4090 165.
  auto half_peak = [&](const char* name, double flops) {
    for (HardwareProfile& p : list)
      if (p.name == name) p.peak_flops_bf16 = p.peak_flops_fp16 = flops;
  };
  half_peak("DGX-H100", 989.4e12);
  half_peak("DGX-A100", 312e12);
  half_peak("8xH100-NVLink", 989e12);
  half_peak("2x8xH100-IB", 989e12);
  half_peak("4xA100-PCIe", 312e12);
  half_peak("2xRTX4090-PCIe", 165.2e12);
  for (HardwareProfile& p : list) apply_efficiency_model(p);
  return list;
}
}  // namespace

HardwareProfile HardwareProfile::load(const std::string& name_or_path) {
  for (auto& p : presets())
    if (p.name == name_or_path) return p;
  const std::string shown = echo_input(name_or_path, 120);
  std::error_code ec;
  const auto status = std::filesystem::status(name_or_path, ec);  // no throw on absurd names
  if (std::filesystem::exists(status) || name_or_path.ends_with(".json")) {
    // A file (or meant to be one): type and size checked before it is read (input_file.h).
    const std::string text = read_input_file(name_or_path, "--profile", kMaxProfileFileBytes);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded())
      throw std::invalid_argument(fmt::format(
          "profile file {}: not valid JSON (see `mgpu profiles` for the format)", shown));
    return from_json(j);
  }
  std::vector<std::string> names = preset_names();
  throw std::invalid_argument(fmt::format("unknown profile '{}' (presets: {}; or a JSON file path)",
                                          shown, fmt::join(names, ", ")));
}

std::vector<std::string> HardwareProfile::preset_names() {
  std::vector<std::string> names;
  for (auto& p : presets()) names.push_back(p.name);
  return names;
}

HardwareProfile HardwareProfile::ideal(double kernel_seconds) {
  HardwareProfile p;
  p.name = "ideal";
  p.description = "every kernel costs the same fixed time; links are free";
  p.launch_overhead = kernel_seconds;
  p.ranks_per_node = 1 << 20;
  p.intra_node = {"free", 0, 0};
  p.inter_node = p.intra_node;
  return p;
}

}  // namespace mgpu

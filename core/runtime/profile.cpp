#include "core/runtime/profile.h"

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/runtime/input_file.h"

namespace mgpu {

namespace {
constexpr int64_t GiB = int64_t{1} << 30;

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

// A profile is user input: every number is checked for type, finiteness and range, so a typo
// (0 peak, a string, 1e400) is one clear line, never an infinitely fast device or an overflow.
// `scale` converts the file's unit (TFLOP/s, GB/s, us) to the struct's (FLOP/s, B/s, s).
double number_in(const nlohmann::json& j, const std::string& where, const char* key, double lo,
                 double hi, double scale, bool lo_inclusive, const double* fallback = nullptr) {
  const std::string what = where.empty() ? key : where + "." + key;
  if (!j.contains(key)) {
    if (fallback) return *fallback * scale;
    throw std::invalid_argument(fmt::format(
        "profile: '{}' is missing (needs peak_TFLOPs, mem_bandwidth_GBps, intra_node{{bandwidth_"
        "GBps, latency_us}}; see `mgpu profiles`)",
        what));
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number())
    throw std::invalid_argument(fmt::format("profile: {} must be a number", what));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_inclusive ? x < lo : x <= lo))
    throw std::invalid_argument(fmt::format("profile: {} must be {} {} and at most {}, got {:.6g}",
                                            what, lo_inclusive ? ">=" : ">", lo, hi, x));
  return x * scale;
}

// The smallest rates and fractions a profile may give: below them a modeled time has hundreds of
// digits (a 1e-300 TFLOP/s peak) or a memory capacity rounds to 0 bytes, i.e. "unlimited".
constexpr double kMinTFLOPs = 1e-4;    // 0.1 GFLOP/s
constexpr double kMinGBps = 1e-3;      // 1 MB/s
constexpr double kMinFraction = 1e-3;  // efficiency factors

// An optional field where 0 keeps its meaning ("as fp32", "unlimited") and any other value is
// range-checked like number_in's.
double zero_or_at_least(const nlohmann::json& j, const char* key, double lo, double hi,
                        double scale) {
  const double zero = 0;
  const double x = number_in(j, "", key, 0, hi, 1, true, &zero);
  if (x != 0 && x < lo)
    throw std::invalid_argument(
        fmt::format("profile: {} must be 0 or from {:g} to {:g}, got {:.6g}", key, lo, hi, x));
  return x * scale;
}

nlohmann::json link_json(const LinkSpec& l) {
  return {{"name", l.name},
          {"bandwidth_GBps", l.bandwidth / 1e9},
          {"latency_us", l.latency * 1e6},
          {"efficiency", l.efficiency}};
}

nlohmann::json efficiency_json(const Efficiency& e) {
  nlohmann::json tiles = nlohmann::json::array();
  for (const auto& [m, n] : e.gemm_tiles) tiles.push_back({m, n});
  return {{"sm_count", e.sm_count},
          {"gemm_tiles", tiles},
          {"gemm_fp32", e.gemm_fp32},
          {"gemm_half", e.gemm_half},
          {"hbm", e.hbm},
          {"fused_attention", e.fused_attention},
          {"flash_fraction", e.flash_fraction},
          {"overlap_slowdown", e.overlap_slowdown}};
}

// Every factor optional (a missing one keeps the datasheet default); fractions in (0, 1].
Efficiency efficiency_from(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("profile: efficiency must be an object");
  Efficiency e;
  const double one = 1, zero = 0;
  const char* where = "efficiency";
  e.sm_count = static_cast<int>(number_in(j, where, "sm_count", 0, 1 << 16, 1, true, &zero));
  e.gemm_fp32 = number_in(j, where, "gemm_fp32", kMinFraction, 1, 1, true, &one);
  e.gemm_half = number_in(j, where, "gemm_half", kMinFraction, 1, 1, true, &one);
  e.hbm = number_in(j, where, "hbm", kMinFraction, 1, 1, true, &one);
  e.flash_fraction = number_in(j, where, "flash_fraction", kMinFraction, 1, 1, true, &one);
  e.overlap_slowdown = number_in(j, where, "overlap_slowdown", 0, 10, 1, true, &zero);
  if (j.contains("fused_attention")) {
    if (!j.at("fused_attention").is_boolean())
      throw std::invalid_argument("profile: efficiency.fused_attention must be true or false");
    e.fused_attention = j.at("fused_attention").get<bool>();
  }
  if (j.contains("gemm_tiles")) {
    const nlohmann::json& tiles = j.at("gemm_tiles");
    if (!tiles.is_array() || tiles.size() > 16)
      throw std::invalid_argument(
          "profile: efficiency.gemm_tiles must be a list of [rows, columns] (at most 16)");
    for (const nlohmann::json& t : tiles) {
      if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() ||
          !t[1].is_number_integer() || t[0].get<int64_t>() < 1 || t[1].get<int64_t>() < 1 ||
          t[0].get<int64_t>() > 4096 || t[1].get<int64_t>() > 4096)
        throw std::invalid_argument(
            "profile: each efficiency.gemm_tiles entry must be [rows, columns], 1 to 4096, e.g. "
            "[128, 128]");
      e.gemm_tiles.emplace_back(t[0].get<int>(), t[1].get<int>());
    }
  }
  return e;
}

LinkSpec link_from(const nlohmann::json& j, const char* what) {
  if (!j.is_object())
    throw std::invalid_argument(fmt::format("profile: {} must be an object", what));
  LinkSpec l;
  l.name = j.value("name", std::string(what)).substr(0, 80);
  l.bandwidth = number_in(j, what, "bandwidth_GBps", kMinGBps, 1e6, 1e9, true);
  l.latency = number_in(j, what, "latency_us", 0, 1e6, 1e-6, true);
  const double one = 1;
  l.efficiency = number_in(j, what, "efficiency", kMinFraction, 1, 1, true, &one);
  return l;
}
}  // namespace

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
  return l.latency + (bandwidth > 0 ? bytes / bandwidth : 0);
}

nlohmann::json HardwareProfile::to_json() const {
  return {{"name", name},
          {"description", description},
          {"peak_TFLOPs", peak_flops / 1e12},
          {"peak_TFLOPs_bf16", peak_flops_bf16 / 1e12},
          {"peak_TFLOPs_fp16", peak_flops_fp16 / 1e12},
          {"mem_bandwidth_GBps", mem_bandwidth / 1e9},
          {"launch_overhead_us", launch_overhead * 1e6},
          {"memory_capacity_GiB", static_cast<double>(memory_capacity) / GiB},
          {"ranks_per_node", ranks_per_node},
          {"peak_label", peak_label},
          {"peak_label_half", peak_label_half},
          {"intra_node", link_json(intra_node)},
          {"inter_node", link_json(inter_node)},
          {"efficiency", efficiency_json(efficiency)}};
}

HardwareProfile HardwareProfile::from_json(const nlohmann::json& j) {
  try {
    if (!j.is_object()) throw std::invalid_argument("profile: the JSON must be an object");
    HardwareProfile p;
    p.name = j.value("name", std::string("custom")).substr(0, 80);
    p.description = j.value("description", std::string()).substr(0, 200);
    const double zero = 0, eight = 8;
    p.peak_flops = number_in(j, "", "peak_TFLOPs", kMinTFLOPs, 1e6, 1e12, true);
    // Optional (older files lack them): 0 = use peak_TFLOPs for that dtype too.
    p.peak_flops_bf16 = zero_or_at_least(j, "peak_TFLOPs_bf16", kMinTFLOPs, 1e6, 1e12);
    p.peak_flops_fp16 = zero_or_at_least(j, "peak_TFLOPs_fp16", kMinTFLOPs, 1e6, 1e12);
    p.mem_bandwidth = number_in(j, "", "mem_bandwidth_GBps", kMinGBps, 1e7, 1e9, true);
    p.launch_overhead = number_in(j, "", "launch_overhead_us", 0, 1e6, 1e-6, true, &zero);
    p.memory_capacity =
        static_cast<int64_t>(zero_or_at_least(j, "memory_capacity_GiB", 1.0 / 1024, 1 << 30, GiB));
    p.ranks_per_node =
        static_cast<int>(number_in(j, "", "ranks_per_node", 1, 1 << 20, 1, true, &eight));
    if (!j.contains("intra_node"))
      throw std::invalid_argument("profile: 'intra_node' is missing (see `mgpu profiles`)");
    p.intra_node = link_from(j.at("intra_node"), "intra_node");
    p.inter_node =
        j.contains("inter_node") ? link_from(j.at("inter_node"), "inter_node") : p.intra_node;
    p.peak_label = j.value("peak_label", p.peak_label).substr(0, 80);
    p.peak_label_half = j.value("peak_label_half", p.peak_label_half).substr(0, 80);
    if (j.contains("efficiency")) p.efficiency = efficiency_from(j.at("efficiency"));
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format(
        "profile: {} (needs peak_TFLOPs, mem_bandwidth_GBps, intra_node{{bandwidth_GBps, "
        "latency_us}}; see `mgpu profiles`)",
        e.what()));
  }
}

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

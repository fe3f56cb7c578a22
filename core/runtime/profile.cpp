#include "core/runtime/profile.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mgpu {

namespace {
constexpr int64_t GiB = int64_t{1} << 30;

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
       "DGX H100 nodes: 8x H100 SXM 80GB on NVSwitch, 400G InfiniBand per GPU; GPUs / 8 nodes",
       494.7e12, 3.35e12, 3e-6, 80 * GiB, 8, nvlink4, ib400},
      {"DGX-A100",
       "DGX A100 nodes: 8x A100 SXM 80GB on NVSwitch, 200G InfiniBand per GPU; GPUs / 8 nodes",
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

nlohmann::json link_json(const LinkSpec& l) {
  return {{"name", l.name}, {"bandwidth_GBps", l.bandwidth / 1e9}, {"latency_us", l.latency * 1e6}};
}

LinkSpec link_from(const nlohmann::json& j, const char* what) {
  if (!j.is_object())
    throw std::invalid_argument(fmt::format("profile: {} must be an object", what));
  LinkSpec l;
  l.name = j.value("name", std::string(what)).substr(0, 80);
  l.bandwidth = number_in(j, what, "bandwidth_GBps", 0, 1e6, 1e9, false);
  l.latency = number_in(j, what, "latency_us", 0, 1e6, 1e-6, true);
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

double HardwareProfile::kernel_time(double flops, double bytes, DType dtype) const {
  const double peak = peak_for(dtype);
  double math = peak > 0 ? flops / peak : 0;
  double memory = mem_bandwidth > 0 ? bytes / mem_bandwidth : 0;
  return launch_overhead + std::max(math, memory);
}

double HardwareProfile::transfer_time(int a, int b, double bytes) const {
  const LinkSpec& l = link(a, b);
  return l.latency + (l.bandwidth > 0 ? bytes / l.bandwidth : 0);
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
          {"intra_node", link_json(intra_node)},
          {"inter_node", link_json(inter_node)}};
}

HardwareProfile HardwareProfile::from_json(const nlohmann::json& j) {
  try {
    if (!j.is_object()) throw std::invalid_argument("profile: the JSON must be an object");
    HardwareProfile p;
    p.name = j.value("name", std::string("custom")).substr(0, 80);
    p.description = j.value("description", std::string()).substr(0, 200);
    const double zero = 0, eight = 8;
    p.peak_flops = number_in(j, "", "peak_TFLOPs", 0, 1e6, 1e12, false);
    // Optional (older files lack them): 0 = use peak_TFLOPs for that dtype too.
    p.peak_flops_bf16 = number_in(j, "", "peak_TFLOPs_bf16", 0, 1e6, 1e12, true, &zero);
    p.peak_flops_fp16 = number_in(j, "", "peak_TFLOPs_fp16", 0, 1e6, 1e12, true, &zero);
    p.mem_bandwidth = number_in(j, "", "mem_bandwidth_GBps", 0, 1e7, 1e9, false);
    p.launch_overhead = number_in(j, "", "launch_overhead_us", 0, 1e6, 1e-6, true, &zero);
    p.memory_capacity =
        static_cast<int64_t>(number_in(j, "", "memory_capacity_GiB", 0, 1 << 30, GiB, true, &zero));
    p.ranks_per_node =
        static_cast<int>(number_in(j, "", "ranks_per_node", 1, 1 << 20, 1, true, &eight));
    if (!j.contains("intra_node"))
      throw std::invalid_argument("profile: 'intra_node' is missing (see `mgpu profiles`)");
    p.intra_node = link_from(j.at("intra_node"), "intra_node");
    p.inter_node =
        j.contains("inter_node") ? link_from(j.at("inter_node"), "inter_node") : p.intra_node;
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
  // Shown names are cut short: a 100k-character name must not flood the terminal.
  const std::string shown =
      name_or_path.size() > 60 ? name_or_path.substr(0, 57) + "..." : name_or_path;
  std::error_code ec;
  const auto status = std::filesystem::status(name_or_path, ec);  // no throw on absurd names
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_regular_file(status))
      throw std::invalid_argument(
          fmt::format("profile '{}' is not a JSON file (a folder or device); name a preset or a "
                      "file",
                      shown));
    std::ifstream in(name_or_path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(
          fmt::format("profile file {}: not valid JSON ({})", shown, e.what()));
    }
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

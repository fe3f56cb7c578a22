// A HardwareProfile to and from JSON (`mgpu profiles`, --profile FILE). A profile file is user
// input: every field is checked for type, finiteness and range, with a one-line message.
#include "core/runtime/profile.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/runtime/profile_internal.h"

namespace mgpu {

using profile_detail::GiB;

namespace {
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

}  // namespace mgpu

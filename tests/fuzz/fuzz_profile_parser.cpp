// Fuzz target: hardware profile JSON. Any input is a profile or std::invalid_argument; a profile
// that loads has finite, positive peaks (a 0 would make the modeled device infinitely fast).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/runtime/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const mgpu::HardwareProfile p = mgpu::HardwareProfile::from_json(j);
    if (!(std::isfinite(p.peak_flops) && p.peak_flops > 0 && p.mem_bandwidth > 0 &&
          p.intra_node.bandwidth > 0 && p.ranks_per_node >= 1))
      std::abort();  // the parser let a nonsensical profile through
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

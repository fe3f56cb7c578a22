// Fuzz target: hardware profile JSON. Any input is a profile or std::invalid_argument; a profile
// that loads has finite peaks of at least 0.1 GFLOP/s (a 0 would make the modeled device
// infinitely fast, a 1e-300 one print 250-digit times) and a capacity of 0 (unlimited) or at
// least 1 MiB (a smaller one rounded to 0 bytes, i.e. unlimited).
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
    if (!(std::isfinite(p.peak_flops) && p.peak_flops >= 1e8 && p.mem_bandwidth >= 1e6 &&
          p.intra_node.bandwidth >= 1e6 && p.ranks_per_node >= 1 &&
          (p.memory_capacity == 0 || p.memory_capacity >= (int64_t{1} << 20))))
      std::abort();  // the parser let a nonsensical profile through
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

// Internal to profile_presets.cpp and profile_json.cpp: the unit both give memory capacities in.
#pragma once
#include <cstdint>

namespace mgpu::profile_detail {

constexpr int64_t GiB = int64_t{1} << 30;

}  // namespace mgpu::profile_detail

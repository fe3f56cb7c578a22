// Reading checkpoints back in tests, and comparing two of them tensor by tensor: the "trains to
// the single-device parameters" check every paradigm's first test makes through --checkpoint.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/model/checkpoint.h"

namespace mgpu::testing {

using CheckpointByName = std::map<std::string, CheckpointTensor>;

// Every tensor of the checkpoint at `path`, by name (validated by the loader).
inline CheckpointByName load_checkpoint_by_name(const std::filesystem::path& path) {
  CheckpointByName by_name;
  for (auto& t : load_checkpoint_tensors(path.string()).tensors) by_name[t.name] = t;
  return by_name;
}

// Largest |a - b| over every tensor of `kind` ("param" or "optimizer_state"); infinity when the
// names or shapes differ, when a value is NaN, or when there is nothing of that kind to compare.
inline float max_difference(const CheckpointByName& a, const CheckpointByName& b,
                            const std::string& kind) {
  float worst = 0;
  int compared = 0;
  for (auto& [name, t] : a) {
    if (t.kind != kind) continue;
    auto it = b.find(name);
    if (it == b.end() || it->second.shape != t.shape) return INFINITY;
    for (size_t i = 0; i < t.values.size(); ++i) {
      const float d = std::abs(t.values[i] - it->second.values[i]);
      if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
    }
    ++compared;
  }
  for (auto& [name, t] : b)
    if (t.kind == kind && !a.count(name)) return INFINITY;
  return compared > 0 ? worst : INFINITY;
}

// The share of `kind` values of `a` within `bound` of `b`'s (0 when names or shapes differ): for
// results that differ at a rounding step, where most values agree and a few are one step apart.
inline double share_within(const CheckpointByName& a, const CheckpointByName& b,
                           const std::string& kind, float bound) {
  int64_t close = 0, total = 0;
  for (const auto& [name, t] : a) {
    if (t.kind != kind) continue;
    auto it = b.find(name);
    if (it == b.end() || it->second.shape != t.shape) return 0;
    for (size_t i = 0; i < t.values.size(); ++i, ++total)
      close += std::abs(t.values[i] - it->second.values[i]) <= bound;
  }
  return total > 0 ? double(close) / double(total) : 0;
}

}  // namespace mgpu::testing

// Reading checkpoints back in tests, and comparing two of them tensor by tensor: the "trains to
// the single-device parameters" check every paradigm's first test makes through --checkpoint.
#pragma once
#include <algorithm>
#include <cmath>
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

inline constexpr float kLessonLr = 3e-3f;  // the lessons' default --lr

// The key third of every attn.qkv.bias has an exact gradient of zero (softmax ignores a constant
// added to every key), so its 2-byte gradient is rounding noise, which a layout that sums partial
// products in another order (tensor parallelism) changes; AdamW's first step,
// lr * g / (|g| + eps), turns any noise into an update within (-lr, lr). Returns the largest
// difference there and sets `got`'s key biases to `want`'s, so that the other parameters can be
// compared at the reordering bound.
inline float take_key_bias_noise(CheckpointByName& got, const CheckpointByName& want, int64_t dim) {
  float worst = 0;
  for (auto& [name, t] : got) {
    if (t.kind != "param" || !name.ends_with(".attn.qkv.bias") || !want.count(name)) continue;
    for (int64_t i = dim; i < 2 * dim; ++i) {
      const auto at = static_cast<size_t>(i);
      worst = std::max(worst, std::abs(t.values.at(at) - want.at(name).values.at(at)));
      t.values[at] = want.at(name).values[at];
    }
  }
  return worst;
}

}  // namespace mgpu::testing

#include "core/model/presets.h"

namespace mgpu {

// As published: GPT-2 (Radford et al. 2019) and GPT-3 (Brown et al. 2020, table 2.1). GPT-3 13B's
// published d_model 5140 is not divisible by its 40 heads; the trained model used 5120. Mixtral
// 8x7B (Jiang et al. 2024, table 1) in our block shape (presets.h).
const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", 2, 64, 4, 32, 0, false},
      {"tiny-moe", 2, 64, 4, 32, 0, false, 4, 2},
      {"gpt2-small", 12, 768, 12, 1024, 50257, true},
      {"gpt2-medium", 24, 1024, 16, 1024, 50257, true},
      {"gpt2-large", 36, 1280, 20, 1024, 50257, true},
      {"gpt2-xl", 48, 1600, 25, 1024, 50257, true},
      {"gpt3-2.7b", 32, 2560, 32, 2048, 50257, true},
      {"gpt3-6.7b", 32, 4096, 32, 2048, 50257, true},
      {"gpt3-13b", 40, 5120, 40, 2048, 50257, true},
      {"mixtral-8x7b", 32, 4096, 32, 4096, 32000, false, 8, 2, 14336},
      {"gpt3-175b", 96, 12288, 96, 2048, 50257, true},
  };
  return presets;
}

const ModelPreset* find_model_preset(const std::string& name) {
  for (const ModelPreset& p : model_presets())
    if (name == p.name) return &p;
  return nullptr;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& p : model_presets()) names.emplace_back(p.name);
  return names;
}

}  // namespace mgpu

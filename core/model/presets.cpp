#include "core/model/presets.h"

namespace mgpu {

namespace {
// Llama's block (RMSNorm, SwiGLU of width ffn, RoPE of base theta, kv_heads, no biases).
constexpr BlockStyle llama(int kv_heads, int ffn, float theta) {
  return {.norm = Norm::rmsnorm,
          .mlp = MlpKind::swiglu,
          .ffn_dim = ffn,
          .positions = Positions::rope,
          .rope_theta = theta,
          .kv_heads = kv_heads,
          .bias = false};
}
}  // namespace

// As published: GPT-2 (Radford et al. 2019) and GPT-3 (Brown et al. 2020, table 2.1). GPT-3 13B's
// published d_model 5140 is not divisible by its 40 heads; the trained model used 5120. Llama 3
// (Dubey et al. 2024, "The Llama 3 Herd of Models", table 3: layers, dim, FFN dim, heads, 8 KV
// heads, vocab 128,256, RoPE base 500,000; pre-trained at 8,192 tokens). Mixtral 8x7B (Jiang et
// al. 2024, table 1: dim 4096, 32 layers, head 128, 32 heads, 8 KV heads, FFN 14336 per expert,
// context 32768, vocab 32000, 8 experts, top 2; its released config's RoPE base 1e6); our preset
// keeps 4096 tokens of context (a parameter-free choice: RoPE has no position table).
// llama-tiny is the teaching model in Llama's block: tiny's sizes, 2 kv heads, F = 192 (about
// Llama's 8/3 C rounded to a multiple of 64).
const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", 2, 64, 4, 32, 0, false},
      {"tiny-moe", 2, 64, 4, 32, 0, false, 4, 2},
      {"llama-tiny", 2, 64, 4, 32, 0, false, 0, 1, 0, llama(2, 192, 10000.0f)},
      {"gpt2-small", 12, 768, 12, 1024, 50257, true},
      {"gpt2-medium", 24, 1024, 16, 1024, 50257, true},
      {"gpt2-large", 36, 1280, 20, 1024, 50257, true},
      {"gpt2-xl", 48, 1600, 25, 1024, 50257, true},
      {"gpt3-2.7b", 32, 2560, 32, 2048, 50257, true},
      {"gpt3-6.7b", 32, 4096, 32, 2048, 50257, true},
      {"llama3-8b", 32, 4096, 32, 8192, 128256, false, 0, 1, 0, llama(8, 14336, 500000.0f)},
      {"gpt3-13b", 40, 5120, 40, 2048, 50257, true},
      {"mixtral-8x7b", 32, 4096, 32, 4096, 32000, false, 8, 2, 14336, llama(8, 14336, 1e6f)},
      {"llama3-70b", 80, 8192, 64, 8192, 128256, false, 0, 1, 0, llama(8, 28672, 500000.0f)},
      {"gpt3-175b", 96, 12288, 96, 2048, 50257, true},
      {"llama3-405b", 126, 16384, 128, 8192, 128256, false, 0, 1, 0, llama(8, 53248, 500000.0f)},
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

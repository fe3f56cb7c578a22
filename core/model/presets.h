// The named model sizes `--model` and `mgpu plan --model` accept: the tiny teaching model (dense
// and with 4 experts), the published GPT-2 and GPT-3 shapes, and Mixtral 8x7B's shape. The
// lessons and the planner both read them from here.
//
// mixtral-8x7b has Mixtral's published sizes (Jiang et al. 2024, table 1: 32 layers, dim 4096,
// 32 heads, vocab 32000, context 4096, 8 experts, top-2, expert hidden 14336), but our blocks:
// each expert is a GELU MLP with 2 matrices (not SwiGLU's 3), attention has no grouped KV heads
// (Mixtral's 8) and positions are learned, so its parameter count is ours (32.5B, 9.9B active per
// token), not Mixtral's 46.7B; the lessons print ours.
#pragma once
#include <string>
#include <vector>

namespace mgpu {

struct ModelPreset {
  const char* name;
  int layers, dim, heads, seq, vocab;  // vocab 0: the task's
  // GPT-2 and GPT-3 tie the output head to the token embedding (their published parameter counts
  // count the matrix once). The tiny model keeps them apart, as its lessons were written: each
  // layer's parameters are its own, so a pipeline's first and last stages share nothing.
  bool tie_embeddings;
  // Mixture of experts (GPTConfig::experts, top_k, expert_hidden): 0 experts = dense.
  int experts = 0, top_k = 1, expert_hidden = 0;
};

// In size order; the first is "tiny".
const std::vector<ModelPreset>& model_presets();
// The preset called `name`, or null.
const ModelPreset* find_model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace mgpu

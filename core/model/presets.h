// The named model sizes `--model` and `mgpu plan --model` accept: the tiny teaching model (dense
// and with 4 experts), the published GPT-2 and GPT-3 shapes, and Mixtral 8x7B's shape. The
// lessons and the planner both read them from here.
//
// The Llama-style presets (llama-tiny, llama3-*, mixtral-8x7b) have Llama's block: RMSNorm, a
// SwiGLU MLP, rotary positions, grouped-query attention and no biases (config.h: BlockStyle), so
// their parameter counts are the published ones (theory::gpt_parameters; test_llama_presets).
#pragma once
#include <string>
#include <vector>

#include "core/model/config.h"

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
  BlockStyle style = {};  // GPT-2's block unless a Llama's
};

// In size order; the first is "tiny".
const std::vector<ModelPreset>& model_presets();
// The preset called `name`, or null.
const ModelPreset* find_model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace mgpu

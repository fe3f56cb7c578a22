// The named model sizes `--model` and `mgpu plan --model` accept: the tiny teaching model and the
// published GPT-2 and GPT-3 shapes. The lessons and the planner both read them from here.
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
};

// In size order; the first is "tiny".
const std::vector<ModelPreset>& model_presets();
// The preset called `name`, or null.
const ModelPreset* find_model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace mgpu

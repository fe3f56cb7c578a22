// A model's shape from a `--model FILE.json` ({"layers", "dim", "heads", "seq", "vocab",
// "tie_embeddings"}, and a mixture of experts' "experts", "top_k", "moe_every", "expert_hidden",
// "capacity_factor", "aux_loss_coef"): every size field an exact integer in its range, so
// `"layers": true`, 2.9 or 4294967298 is refused with one line instead of becoming 1, 2 or 2;
// "tie_embeddings" is true or false (not 1, not "on"); "capacity_factor" a number > 0 or
// "dropless"; "aux_loss_coef" a number >= 0.
//
// The block's style (config.h: BlockStyle), each optional (absent: GPT-2's): "norm" "layernorm" or
// "rmsnorm", "mlp" "gelu" or "swiglu", "ffn_dim" (0: 4 * dim), "positions" "learned" or "rope",
// "rope_theta" a number > 1, "kv_heads" (0: heads), "bias" true or false.
#pragma once
#include <optional>
#include <string>

#include "core/model/config.h"

namespace mgpu {

struct ModelShape {
  int layers = 0, dim = 0, heads = 0, seq = 0;
  int vocab = 0;                       // 0 (or absent): the task's vocabulary
  std::optional<bool> tie_embeddings;  // absent: off (the tiny model's default)
  // Mixture of experts (GPTConfig's fields of the same names); absent: the dense model's.
  int experts = 0, top_k = 1, moe_every = 1, expert_hidden = 0;
  std::optional<double> capacity_factor;  // 0: dropless
  std::optional<float> aux_loss_coef;
  BlockStyle style;  // absent fields: GPT-2's
};

// The ranges a model file's fields must lie in (inclusive), for the messages and the README.
struct ModelFieldRange {
  const char* key;
  int lo, hi;
};
inline constexpr ModelFieldRange kModelFieldRanges[] = {
    {"layers", 1, 10'000},
    {"dim", 1, 1 << 20},
    {"heads", 1, 1 << 16},
    {"seq", 1, 1 << 20},
    {"vocab", 0, 1 << 24},
    // optional, the mixture of experts' sizes
    {"experts", 0, 1 << 16},
    {"top_k", 1, 1 << 16},
    {"moe_every", 1, 10'000},
    {"expert_hidden", 0, 1 << 24},
    // optional, the block's style
    {"ffn_dim", 0, 1 << 24},
    {"kv_heads", 0, 1 << 16},
};

// Parses the text of a model file; `source` names it in messages (e.g. "--model m.json").
// Throws std::invalid_argument with one line naming the field and its range.
ModelShape parse_model_json(const std::string& text, const std::string& source);

// Reads `path` through read_input_file (a regular file of at most kMaxModelFileBytes) and parses
// it.
ModelShape read_model_file(const std::string& path);

}  // namespace mgpu

// A model's shape from a `--model FILE.json` ({"layers", "dim", "heads", "seq", "vocab",
// "tie_embeddings"}): every size field an exact integer in its range, so `"layers": true`, 2.9 or
// 4294967298 is refused with one line instead of becoming 1, 2 or 2; "tie_embeddings" is true or
// false (not 1, not "on").
#pragma once
#include <optional>
#include <string>

namespace mgpu {

struct ModelShape {
  int layers = 0, dim = 0, heads = 0, seq = 0;
  int vocab = 0;                       // 0 (or absent): the task's vocabulary
  std::optional<bool> tie_embeddings;  // absent: off (the tiny model's default)
};

// The ranges a model file's fields must lie in (inclusive), for the messages and the README.
struct ModelFieldRange {
  const char* key;
  int lo, hi;
};
inline constexpr ModelFieldRange kModelFieldRanges[] = {
    {"layers", 1, 10'000}, {"dim", 1, 1 << 20},   {"heads", 1, 1 << 16},
    {"seq", 1, 1 << 20},   {"vocab", 0, 1 << 24},
};

// Parses the text of a model file; `source` names it in messages (e.g. "--model m.json").
// Throws std::invalid_argument with one line naming the field and its range.
ModelShape parse_model_json(const std::string& text, const std::string& source);

// Reads `path` through read_input_file (a regular file of at most kMaxModelFileBytes) and parses
// it.
ModelShape read_model_file(const std::string& path);

}  // namespace mgpu

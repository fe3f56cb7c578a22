// Fuzz target: `--model FILE.json`. Any input is a model shape or std::invalid_argument; a shape
// that loads has every field an integer within kModelFieldRanges (nothing coerced from a bool,
// a fraction or a wrapped 64-bit number).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "core/model/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const mgpu::ModelShape s = mgpu::parse_model_json(text, "fuzz");
    const int fields[] = {s.layers,        s.dim,           s.heads,         s.seq,
                          s.vocab,         s.experts,       s.top_k,         s.moe_every,
                          s.expert_hidden, s.style.ffn_dim, s.style.kv_heads};
    static_assert(std::size(fields) == std::size(mgpu::kModelFieldRanges));
    int i = 0;
    for (const mgpu::ModelFieldRange& r : mgpu::kModelFieldRanges) {
      if (fields[i] < r.lo || fields[i] > r.hi) std::abort();  // a value out of its range loaded
      ++i;
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

// What `mgpu validate`'s files share (validate_clock.cpp, validate_unseen.cpp,
// validate_llama.cpp): a row of the table, its bound, and the GPT-3 family's shape as the
// Megatron-LM papers train it.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/runtime/profile.h"

namespace mgpu::lessons {

// timing: within 10%; exact (memory, bubbles): equal to the published digits; unseen: a published
// run the profile was not fitted to, printed with its error and held to no bound (docs/clock.md
// says what the clock gets wrong there and why).
enum class Bound : uint8_t { timing, exact, unseen };

struct Row {
  std::string source, quantity;
  double published = 0, predicted = 0;
  Bound bound = Bound::timing;
  int digits = 0;  // decimals the published figure is given with (exact rows)
  double error() const { return (predicted - published) / published; }
  bool passes() const {
    if (bound == Bound::unseen) return true;
    if (bound == Bound::timing) return std::abs(error()) <= kTimingBound;
    const double scale = std::pow(10.0, digits);
    return std::round(predicted * scale) == std::round(published * scale);
  }
  const char* bound_name() const {
    return bound == Bound::timing ? "10%" : bound == Bound::exact ? "exact" : "unseen";
  }
  static constexpr double kTimingBound = 0.10;
};

// The GPT-3 family shapes of the Megatron-LM papers (Korthikanti et al. 2022, Table 3; Narayanan
// et al. 2021, Table 1): vocabulary 51200, sequence 2048, bf16.
inline GPTConfig megatron_model(int layers, int dim, int heads) {
  GPTConfig c;
  c.vocab = 51200;
  c.seq_len = 2048;
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.dtype = DType::bf16;
  return c;
}

// Narayanan et al. 2021's weak-scaling runs (Table 1), each pinned as published: rows of
// Bound::unseen (validate_unseen.cpp).
void narayanan_table1_rows(const HardwareProfile& profile, std::vector<Row>& rows);

// Llama 3 405B's pre-training layouts (Dubey et al. 2024, Table 4) on the DGX-H100 profile, the
// runs' hardware: rows of Bound::unseen (validate_llama.cpp). A layout the engine refuses is not
// run: its one line goes to `not_run`.
void llama3_table4_rows(std::vector<Row>& rows, std::vector<std::string>& not_run);

}  // namespace mgpu::lessons

// checkpoint_compare A B MAX [BOUND SHARE]: compares two checkpoints of the same model (a cuda
// run's and the cpu run's of the same configuration, tests/gpu/run_gpu_checks.sh) tensor by
// tensor, parameters and optimizer state, and prints per kind the largest |a - b| and the share
// of values within BOUND of each other.
//   pass (exit 0): every difference <= MAX and, when BOUND is given, a share >= SHARE of each
//                  kind within BOUND;
//   fail (exit 1): otherwise (and when the two hold different tensors);
//   bad input (exit 2): a file that is not a checkpoint, or bad numbers, in one line.
// fp32 runs use MAX alone (the cpu tests' reordering bound); bf16 runs the cpu tests' rule for
// results that differ at a rounding step (test_lesson_precision.cpp): most values within the
// fp32 bound, none further than one AdamW update.
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "common/checkpoints.h"

namespace {

using mgpu::testing::CheckpointByName;
using mgpu::testing::share_within;

float parse_number(const char* text, const char* what) {
  size_t used = 0;
  const float value = std::stof(text, &used);
  if (used != std::string(text).size() || !(value >= 0))
    throw std::invalid_argument(std::string(what) + " must be a number >= 0, not '" + text + "'");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    std::fprintf(stderr, "usage: checkpoint_compare A.ckpt B.ckpt MAX [BOUND SHARE]\n");
    return 2;
  }
  CheckpointByName a, b;
  float max_allowed = 0, bound = 0, share = 0;
  try {
    a = mgpu::testing::load_checkpoint_by_name(argv[1]);
    b = mgpu::testing::load_checkpoint_by_name(argv[2]);
    max_allowed = parse_number(argv[3], "MAX");
    if (argc == 6) {
      bound = parse_number(argv[4], "BOUND");
      share = parse_number(argv[5], "SHARE");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_compare: %s\n", e.what());
    return 2;
  }
  bool pass = true;
  for (const char* kind : {"param", "optimizer_state"}) {
    const float worst = mgpu::testing::max_difference(a, b, kind);
    const bool kind_ok = worst <= max_allowed;
    std::printf("  %-16s max |a - b| %.3g (allowed %.3g)", kind, worst, max_allowed);
    bool share_ok = true;
    if (argc == 6) {
      const double within = share_within(a, b, kind, bound);
      share_ok = within >= share;
      std::printf(", %.4f within %.3g (required %.4f)", within, bound, share);
    }
    std::printf("  %s\n", kind_ok && share_ok ? "ok" : "DIFFERS");
    pass = pass && kind_ok && share_ok;
  }
  return pass ? 0 : 1;
}

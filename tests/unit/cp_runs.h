// Context-parallel lesson runs from tests: the command line of one layout, and the "trains to the
// single-device parameters" comparison through --checkpoint that every exact layout must pass
// (test_context_parallel for GPT-2's block, test_context_parallel_llama for Llama's).
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/checkpoints.h"
#include "unit/mgpu_cli.h"

namespace mgpu::testing {

// `mgpu run context_parallel` at `cp` ranks in `layout` (no comparison runs), then `more`.
inline std::vector<std::string> cp_run(const std::string& layout, int cp,
                                       std::vector<std::string> more) {
  std::vector<std::string> args = {
      "run",  "context_parallel", "--cp", std::to_string(cp), "--cp-layout",
      layout, "--compare",        "off"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// One layout at one cp against the single-device run of the same options: exit code and the
// largest parameter and optimizer-state differences (infinity when a run wrote nothing).
struct CpDifference {
  std::string layout;
  int cp = 0;
  int code = 0;
  std::string err;
  float params = 0, optimizer_state = 0;
};

// `model`: the options both runs share (model, sizes, steps). Every layout at every cp.
inline std::vector<CpDifference> differences_from_single_device(
    const std::vector<std::string>& model, const std::vector<std::string>& layouts,
    const std::vector<int>& cps) {
  auto with_model = [&](std::vector<std::string> args) {
    args.insert(args.end(), model.begin(), model.end());
    return args;
  };
  const std::string single = temp_path("cp_single.ckpt");
  std::vector<CpDifference> found;
  const CliResult one = run_mgpu(with_model({"run", "single_device", "--checkpoint", single}));
  if (one.code != 0) return {{"single_device", 1, one.code, one.err, INFINITY, INFINITY}};
  const CheckpointByName want = load_checkpoint_by_name(single);
  for (const std::string& layout : layouts)
    for (int cp : cps) {
      const std::string path = temp_path("cp_" + layout + std::to_string(cp) + ".ckpt");
      const CliResult r = run_mgpu(with_model(cp_run(layout, cp, {"--checkpoint", path})));
      CpDifference d{layout, cp, r.code, r.err, INFINITY, INFINITY};
      if (r.code == 0) {
        const CheckpointByName got = load_checkpoint_by_name(path);
        d.params = max_difference(got, want, "param");
        d.optimizer_state = max_difference(got, want, "optimizer_state");
      }
      found.push_back(d);
      std::filesystem::remove(path);
    }
  std::filesystem::remove(single);
  return found;
}

// Every layout at every cp trains to the single-device parameters and optimizer state within
// `bound` (fp32: the ring sums attention in another order than the one-device kernel).
inline void check_trains_to_single_device(const std::vector<std::string>& model,
                                          const std::vector<std::string>& layouts,
                                          const std::vector<int>& cps, float bound) {
  for (const CpDifference& d : differences_from_single_device(model, layouts, cps)) {
    INFO(d.layout << " cp=" << d.cp << ": " << d.err);
    REQUIRE(d.code == 0);
    CHECK(d.params < bound);
    CHECK(d.optimizer_state < bound);
  }
}

}  // namespace mgpu::testing

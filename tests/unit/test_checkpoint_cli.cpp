// Issue #33, classes 2 and 3 through the command line: a diverging run stops at the step it
// diverges with one line naming the likely cause, a non-zero exit and no checkpoint, in every
// layout; a resumed checkpoint must be of the same model (one line, exit 2), and one holding
// parameters only resumes with a fresh optimizer.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "unit/mgpu_cli.h"

namespace test_checkpoint_cli {

using mgpu::testing::count_lines;
using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;
namespace fs = std::filesystem;

namespace {

// A tiny model each layout can run on 2 ranks (hybrid: dp 2 x tp 2 x pp 2 on 8).
std::vector<std::string> tiny(const std::string& lesson, int steps) {
  std::vector<std::string> a = {"run",      lesson, "--steps", std::to_string(steps),
                                "--layers", "2",    "--dim",   "16",
                                "--heads",  "2",    "--seq",   "8",
                                "--batch",  "8",    "-q"};
  if (lesson == "hybrid")
    a.insert(a.end(), {"--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2"});
  else if (lesson != "single_device")
    a.insert(a.end(), {"--ranks", "2"});
  return a;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// A valid checkpoint of `steps` single-device steps, read back whole.
mgpu::CheckpointContents trained(const std::string& path, int steps) {
  auto r = run_mgpu(with(tiny("single_device", steps), {"--checkpoint", path}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  return mgpu::load_checkpoint_tensors(path);
}

}  // namespace

TEST_CASE("lr 1e30 stops every layout at the step it diverges, without a checkpoint",
          "[checkpoint][divergence]") {
  for (const std::string lesson :
       {"single_device", "ddp", "tensor_parallel", "pipeline", "zero", "hybrid"}) {
    INFO(lesson);
    const std::string ckpt = temp_path("diverged_" + lesson + ".safetensors");
    auto r = run_mgpu(with(tiny(lesson, 6), {"--lr", "1e30", "--checkpoint", ckpt}));
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("training diverged at step "));
    CHECK_THAT(r.err, Catch::Contains("likely cause: --lr 1e+30 is far above the usual"));
    CHECK(!fs::exists(ckpt));
  }
}

// fp16 skips a step whose scaled gradients overflow and halves the scale; that cannot rescue
// weights that overflow in the forward pass, so a non-finite loss stops the run even on a skipped
// step.
TEST_CASE("lr 1e30 in fp16 stops the run rather than skipping every step",
          "[checkpoint][divergence]") {
  for (const std::string lesson : {"single_device", "ddp", "pipeline"}) {
    INFO(lesson);
    const std::string ckpt = temp_path("diverged_fp16_" + lesson + ".safetensors");
    auto r = run_mgpu(
        with(tiny(lesson, 8), {"--precision", "fp16", "--lr", "1e30", "--checkpoint", ckpt}));
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("training diverged at step ") &&
                          Catch::Contains("the loss is") &&
                          Catch::Contains("likely cause: --lr 1e+30 is far above the usual"));
    CHECK(!fs::exists(ckpt));
  }
}

// No forward follows the last update, so its parameters are read back before a checkpoint is
// written: one SGD step of lr 3e38 (a float; 1e39 is refused as no float) with an L2 term of 10
// overflows the layernorm weights (1.0) to inf.
TEST_CASE("the last update's non-finite parameters stop the run before the checkpoint",
          "[checkpoint][divergence]") {
  const std::string ckpt = temp_path("diverged_last_step.safetensors");
  auto r = run_mgpu(with(tiny("single_device", 1), {"--optimizer", "sgd", "--lr", "3e38",
                                                    "--weight-decay", "10", "--checkpoint", ckpt}));
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("training diverged at step 1: parameter '") &&
                        Catch::Contains("holds NaN or inf after the update"));
  CHECK(!fs::exists(ckpt));
}

TEST_CASE("a huge --weight-decay is named as the cause", "[checkpoint][divergence]") {
  for (const std::string lesson : {"single_device", "ddp"}) {
    INFO(lesson);
    const std::string ckpt = temp_path("decayed_" + lesson + ".safetensors");
    auto r = run_mgpu(with(tiny(lesson, 6), {"--weight-decay", "1e30", "--checkpoint", ckpt}));
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--weight-decay 1e+30 is far above the usual 0..0.1"));
    CHECK(!fs::exists(ckpt));
  }
}

TEST_CASE("a checkpoint with a huge (finite) first moment diverges with a diagnosis",
          "[checkpoint][divergence]") {
  const std::string good = temp_path("moment_good.safetensors");
  mgpu::CheckpointContents c = trained(good, 2);
  for (mgpu::CheckpointTensor& t : c.tensors)
    if (t.name.rfind("adamw.m.", 0) == 0)
      for (float& v : t.values) v = 1e30f;
  const std::string forged = temp_path("moment_forged.safetensors");
  mgpu::save_checkpoint_tensors(forged, c.tensors, c.info.step, c.info.config, c.info.optimizer,
                                c.info.model);
  const std::string out = temp_path("moment_out.safetensors");
  auto r = run_mgpu(with(tiny("ddp", 6), {"--resume", forged, "--checkpoint", out}));
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("training diverged at step "));
  CHECK_THAT(r.err, Catch::Contains("holds values up to 1e+30"));
  CHECK(!fs::exists(out));
}

TEST_CASE("resuming a checkpoint of another model config is one line, exit 2",
          "[checkpoint][resume]") {
  const std::string path = temp_path("heads2.safetensors");
  trained(path, 2);
  // --heads 4 makes the same parameter shapes as --heads 2: only the config tells them apart.
  for (const std::string lesson : {"single_device", "tensor_parallel"}) {
    INFO(lesson);
    auto args = with(tiny(lesson, 4), {"--resume", path});
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--heads") args[i + 1] = "4";
    auto r = run_mgpu(args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("with heads 2, but this run's has heads 4: resume with "
                                      "--heads 2"));
  }
}

TEST_CASE("a parameters-only checkpoint resumes with a fresh optimizer, saying so",
          "[checkpoint][resume]") {
  mgpu::CheckpointContents c = trained(temp_path("full.safetensors"), 2);
  std::vector<mgpu::CheckpointTensor> params;
  for (const mgpu::CheckpointTensor& t : c.tensors)
    if (t.kind == "param") params.push_back(t);
  const std::string only = temp_path("params_only.safetensors");
  mgpu::save_checkpoint_tensors(only, params, c.info.step, c.info.config, nullptr, c.info.model);
  for (const std::string lesson : {"single_device", "ddp", "zero"}) {
    INFO(lesson);
    const std::string out = temp_path("resumed_" + lesson + ".safetensors");
    auto r = run_mgpu(with(tiny(lesson, 4), {"--resume", only, "--checkpoint", out}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("checkpoint " + only +
                                      " holds parameters only (no optimizer state): adamw starts "
                                      "fresh"));
    // Two steps from the fresh optimizer: its step count is 2, not the checkpoint's 2 + 2.
    CHECK(mgpu::read_checkpoint_info(out).optimizer.at("step_count") == 2);
    CHECK(mgpu::read_checkpoint_info(out).step == 4);
  }
}

}  // namespace test_checkpoint_cli

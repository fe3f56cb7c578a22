// The one training loop's promises, through every training lesson's command line: --checkpoint
// writes the gathered full model in the single-device format (the same parameters single_device
// trains to), --resume continues from ANY lesson's checkpoint, and bad checkpoints or options are
// one line with exit code 2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/checkpoints.h"
#include "core/model/checkpoint.h"
#include "unit/mgpu_cli.h"

namespace test_lesson_checkpoints {

using mgpu::testing::run_mgpu;

namespace {

using mgpu::testing::load_checkpoint_by_name;
using mgpu::testing::max_difference;

namespace fs = std::filesystem;

const std::vector<std::string> kLessons = {"single_device", "data_parallel",  "ddp",
                                           "grad_accum",    "model_parallel", "pipeline"};

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / "mgpu_test_lesson_checkpoints";
  fs::create_directories(dir);
  return dir;
}

// A tiny model every lesson can run: 4 layers (two per pipeline stage), global batch 8.
std::vector<std::string> tiny_run(const std::string& lesson, int steps,
                                  const std::string& dim = "16") {
  std::vector<std::string> a = {"run",      lesson, "--steps", std::to_string(steps),
                                "--layers", "4",    "--dim",   dim,
                                "--heads",  "2",    "--seq",   "8",
                                "--batch",  "8",    "-q"};
  if (lesson != "single_device") a.insert(a.end(), {"--ranks", "2"});
  if (lesson == "pipeline") a.insert(a.end(), {"--microbatches", "4"});
  if (lesson == "grad_accum") a.insert(a.end(), {"--accum", "2"});
  return a;
}

// Same global-batch gradient, summed in another order (shards, micro-batches): fp32 rounding,
// amplified by AdamW's 1/sqrt(v) (see test_ddp.cpp).
constexpr float kTolerance = 2e-5f;

fs::path checkpoint_of(const std::string& lesson, int steps, const std::string& tag,
                       const std::string& resume = "") {
  fs::path path = scratch() / (lesson + "_" + tag + ".ckpt");
  auto args = tiny_run(lesson, steps);
  args.insert(args.end(), {"--checkpoint", path.string()});
  if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
  auto r = run_mgpu(args);
  INFO(lesson << ": " << r.err);
  REQUIRE(r.code == 0);
  REQUIRE(fs::exists(path));
  return path;
}

}  // namespace

TEST_CASE("every lesson's checkpoint is the single-device model after the same steps",
          "[lesson][checkpoint]") {
  auto reference = load_checkpoint_by_name(checkpoint_of("single_device", 3, "straight"));
  for (const std::string& lesson : kLessons) {
    INFO(lesson);
    auto mine = load_checkpoint_by_name(checkpoint_of(lesson, 3, "straight"));
    CHECK(max_difference(mine, reference, "param") <= kTolerance);
    CHECK(max_difference(mine, reference, "optimizer_state") <= kTolerance);
    CHECK(mgpu::read_checkpoint_info((scratch() / (lesson + "_straight.ckpt")).string())
              .optimizer.at("step_count") == 3);
  }
}

TEST_CASE("a DDP checkpoint resumed by any lesson continues the same training",
          "[lesson][checkpoint]") {
  auto straight = load_checkpoint_by_name(checkpoint_of("single_device", 4, "four"));
  fs::path half = checkpoint_of("ddp", 2, "half");
  for (const std::string& lesson : kLessons) {
    INFO("ddp for 2 steps, then " << lesson << " for 2 more");
    auto resumed = load_checkpoint_by_name(checkpoint_of(lesson, 4, "resumed", half.string()));
    CHECK(max_difference(resumed, straight, "param") <= kTolerance);
    CHECK(max_difference(resumed, straight, "optimizer_state") <= kTolerance);
  }
  // And without resuming, two more steps from the start are not the same training.
  auto restarted = load_checkpoint_by_name(checkpoint_of("pipeline", 2, "restarted"));
  CHECK(max_difference(restarted, straight, "param") > 1e-4f);
}

TEST_CASE("bad checkpoints and impossible checkpoint requests: one line, exit 2",
          "[lesson][checkpoint]") {
  fs::path corrupt = scratch() / "corrupt.ckpt";
  std::ofstream(corrupt) << "MGPUCKPT but not really";
  fs::path good = checkpoint_of("single_device", 2, "small");
  fs::path done = checkpoint_of("single_device", 3, "done");
  for (const std::string& lesson : kLessons) {
    struct Case {
      std::string what;
      std::vector<std::string> extra;
      std::string says;
      std::string dim = "16";
    };
    std::vector<Case> cases = {
        {"missing file",
         {"--resume", "/nonexistent/run.ckpt"},
         "--resume: '/nonexistent/run.ckpt' does not exist"},
        {"corrupt file", {"--resume", corrupt.string()}, "checkpoint"},
        {"another model", {"--resume", good.string()}, "parameters", "32"},
        {"already past --steps", {"--resume", done.string()}, "already at step"},
        {"phantom device", {"--device", "phantom", "--checkpoint", "x.ckpt"}, "phantom"},
    };
    for (const Case& c : cases) {
      INFO(lesson << ": " << c.what);
      auto args = tiny_run(lesson, 3, c.dim);
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      auto r = run_mgpu(args);
      INFO(r.err);
      CHECK(r.code == 2);
      CHECK(mgpu::testing::count_lines(r.err) == 1);
      CHECK(r.err.find(c.says) != std::string::npos);
    }
  }
}

TEST_CASE("the weight decay option reaches the optimizer in every lesson", "[lesson][checkpoint]") {
  for (const std::string& lesson : kLessons) {
    INFO(lesson);
    auto plain = load_checkpoint_by_name(checkpoint_of(lesson, 2, "wd_default"));
    fs::path path = scratch() / (lesson + "_wd.ckpt");
    auto args = tiny_run(lesson, 2);
    args.insert(args.end(), {"--weight-decay", "0.5", "--checkpoint", path.string()});
    REQUIRE(run_mgpu(args).code == 0);
    CHECK(max_difference(load_checkpoint_by_name(path), plain, "param") > 1e-5f);
    CHECK(mgpu::read_checkpoint_info(path.string()).optimizer.at("weight_decay") == 0.5);
  }
}

// Tied embeddings (--tie-embeddings on): every layout trains to the tied single-device model. The
// pipeline keeps a copy of wte on its first and last stages and sums their gradients over the
// embedding group; without that sum the copies drift apart and the checkpoint (the first stage's
// wte) misses the head's gradient.
TEST_CASE("tied embeddings: every layout's checkpoint is the tied single-device model",
          "[lesson][checkpoint][tied]") {
  auto tied_run = [](const std::string& lesson, const std::string& tag,
                     std::vector<std::string> more) {
    fs::path path = scratch() / ("tied_" + lesson + "_" + tag + ".ckpt");
    auto args = tiny_run(lesson, 3);
    if (std::find(more.begin(), more.end(), "--ranks") != more.end())  // replaces tiny_run's 2
      args.erase(std::find(args.begin(), args.end(), "--ranks"),
                 std::find(args.begin(), args.end(), "--ranks") + 2);
    args.insert(args.end(), {"--tie-embeddings", "on", "--checkpoint", path.string()});
    args.insert(args.end(), more.begin(), more.end());
    auto r = run_mgpu(args);
    INFO(lesson << " " << tag << ": " << r.err);
    REQUIRE(r.code == 0);
    return load_checkpoint_by_name(path);
  };
  for (const std::string precision : {"fp32", "bf16"}) {
    INFO(precision);
    auto reference = tied_run("single_device", precision, {"--precision", precision});
    REQUIRE(reference.count("embedding.wte") == 1);
    REQUIRE(reference.count("head.lm_head.weight") == 0);  // stored once
    struct Layout {
      std::string lesson, tag;
      std::vector<std::string> more;
    };
    std::vector<Layout> layouts = {
        {"pipeline", "2stages", {}},
        {"pipeline", "4stages", {"--ranks", "4"}},
        {"ddp", "ddp", {}},
    };
    if (precision == "fp32")
      layouts.insert(
          layouts.end(),
          {{"pipeline", "zbh1", {"--schedule", "zb-h1"}},
           {"tensor_parallel", "tp", {}},
           {"zero", "zero0", {"--stage", "0"}},
           {"zero", "zero1", {"--stage", "1"}},
           {"hybrid", "hybrid", {"--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2"}}});
    for (const Layout& l : layouts) {
      INFO(l.lesson << " " << l.tag);
      std::vector<std::string> more = l.more;
      more.insert(more.end(), {"--precision", precision});
      auto mine = tied_run(l.lesson, l.tag + precision, more);
      CHECK(mine.count("head.lm_head.weight") == 0);
      CHECK(max_difference(mine, reference, "param") <= kTolerance);
      CHECK(max_difference(mine, reference, "optimizer_state") <= kTolerance);
    }
  }
  // Tying is a different model: the untied run's wte differs.
  auto untied = load_checkpoint_by_name(checkpoint_of("single_device", 3, "straight"));
  auto tied = tied_run("single_device", "again", {});
  CHECK(max_difference(untied, tied, "param") > 1e-4f);
}

TEST_CASE("tied embeddings: a checkpoint resumes across layouts, not across the flag",
          "[lesson][checkpoint][tied]") {
  auto run = [](const std::string& lesson, int steps, const std::string& tag,
                std::vector<std::string> more) {
    fs::path path = scratch() / ("tied_resume_" + lesson + "_" + tag + ".ckpt");
    auto args = tiny_run(lesson, steps);
    args.insert(args.end(), {"--checkpoint", path.string()});
    args.insert(args.end(), more.begin(), more.end());
    return std::pair{run_mgpu(args), path};
  };
  auto [s, straight] = run("single_device", 4, "four", {"--tie-embeddings", "on"});
  REQUIRE(s.code == 0);
  for (const std::string first : {"single_device", "pipeline", "zero"}) {
    auto [h, half] = run(first, 2, "half", {"--tie-embeddings", "on"});
    INFO(first << ": " << h.err);
    REQUIRE(h.code == 0);
    for (const std::string then : {"single_device", "pipeline", "zero"}) {
      INFO(first << " then " << then);
      auto [r, resumed] =
          run(then, 4, "resumed", {"--tie-embeddings", "on", "--resume", half.string()});
      INFO(r.err);
      REQUIRE(r.code == 0);
      CHECK(max_difference(load_checkpoint_by_name(resumed), load_checkpoint_by_name(straight),
                           "param") <= kTolerance);
    }
  }
  auto [h, half] = run("pipeline", 2, "half", {"--tie-embeddings", "on"});
  REQUIRE(h.code == 0);
  auto [r, path] = run("single_device", 4, "untied", {"--resume", half.string()});
  CHECK(r.code == 2);
  CHECK(mgpu::testing::count_lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("--tie-embeddings \"on\""));
}

}  // namespace test_lesson_checkpoints

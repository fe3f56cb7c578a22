// The zero lesson: every stage's --checkpoint (the gathered full model and AdamW state) equals
// single_device's and ddp's after the same steps, on 1..8 ranks with uneven shards, in fp32 and
// bf16; checkpoints resume across stages and rank counts; bf16 keeps K = 12 bytes of optimizer
// state per parameter, split over the ranks; recompute changes nothing; it prints the measured
// memory and wire bytes beside the formulas; --paper runs the 7.5B / 64-GPU figure on phantom
// GPUs; bad combinations are one line with exit code 2.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "common/checkpoints.h"
#include "core/trace/analysis.h"
#include "lessons/zero.h"
#include "unit/mgpu_cli.h"

namespace test_zero_lesson {

using namespace mgpu;
using mgpu::testing::load_checkpoint_by_name;
using mgpu::testing::max_difference;
using mgpu::testing::run_mgpu;

namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / "mgpu_test_zero_lesson";
  fs::create_directories(dir);
  return dir;
}

// 3 layers of dim 16: units of 3,216 / 3,264 / ... elements, which 3, 5, 7 ranks do not divide.
// The global batch is 2 per rank unless `batch` says otherwise.
std::vector<std::string> tiny_run(const std::string& lesson, int ranks, int steps, int batch = 0) {
  std::vector<std::string> a = {"run",      lesson,
                                "--steps",  std::to_string(steps),
                                "--layers", "3",
                                "--dim",    "16",
                                "--heads",  "2",
                                "--seq",    "8",
                                "--batch",  std::to_string(batch > 0 ? batch : 2 * ranks),
                                "-q"};
  if (lesson != "single_device") a.insert(a.end(), {"--ranks", std::to_string(ranks)});
  return a;
}

fs::path checkpoint_of(const std::string& lesson, int ranks, std::vector<std::string> extra,
                       const std::string& tag, int steps = 3, int batch = 0) {
  fs::path path = scratch() / (lesson + "_" + tag + ".ckpt");
  auto args = tiny_run(lesson, ranks, steps, batch);
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--checkpoint", path.string()});
  auto r = run_mgpu(args);
  INFO(lesson << " " << tag << ": " << r.err);
  REQUIRE(r.code == 0);
  return path;
}

// Rounding only: gradients are averaged in another order; AdamW's 1/sqrt(v) amplifies it in tiny
// gradients (the same bound as the DDP and tensor-parallel checkpoint tests).
constexpr float kTolerance = 2e-5f;

}  // namespace

TEST_CASE("every zero stage checkpoints the single-device model on 1 to 8 ranks",
          "[zero][lesson][equivalence]") {
  for (int ranks : {1, 2, 3, 5, 8}) {
    const auto single =
        load_checkpoint_by_name(checkpoint_of("single_device", ranks, {}, "single"));
    const auto ddp = load_checkpoint_by_name(checkpoint_of("ddp", ranks, {}, "ddp"));
    for (int stage = 0; stage <= 3; ++stage) {
      INFO("ranks " << ranks << ", stage " << stage);
      const std::string tag = "zero" + std::to_string(stage);
      const auto zero = load_checkpoint_by_name(
          checkpoint_of("zero", ranks, {"--stage", std::to_string(stage)}, tag));
      CHECK(max_difference(zero, single, "param") < kTolerance);
      CHECK(max_difference(zero, single, "optimizer_state") < kTolerance);
      CHECK(max_difference(zero, ddp, "param") < kTolerance);
    }
  }
}

TEST_CASE("zero checkpoints resume at any stage and rank count", "[zero][lesson][checkpoint]") {
  // global batch 6 throughout: 2 steps of stage 1 on 2 ranks -> 2 more of stage 3 on 3 ranks
  // (other shards, other units' chunks) == 4 steps on one device; and stage 3 -> single device.
  const auto want = load_checkpoint_by_name(checkpoint_of("single_device", 3, {}, "want", 4));
  const fs::path half = checkpoint_of("zero", 2, {"--stage", "1"}, "half", 2, 6);
  auto resumed = tiny_run("zero", 3, 4);
  const fs::path done = scratch() / "resumed.ckpt";
  resumed.insert(resumed.end(),
                 {"--stage", "3", "--resume", half.string(), "--checkpoint", done.string()});
  auto r = run_mgpu(resumed);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto got = load_checkpoint_by_name(done);
  CHECK(max_difference(got, want, "param") < kTolerance);
  CHECK(max_difference(got, want, "optimizer_state") < kTolerance);

  const fs::path half3 = checkpoint_of("zero", 3, {"--stage", "3"}, "half3", 2);
  auto back = tiny_run("single_device", 3, 4);
  const fs::path single_done = scratch() / "single_done.ckpt";
  back.insert(back.end(), {"--resume", half3.string(), "--checkpoint", single_done.string()});
  r = run_mgpu(back);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(max_difference(load_checkpoint_by_name(single_done), want, "param") < kTolerance);
}

TEST_CASE("zero bf16 and fp16: single-device masters and 2 + 4 + 12 bytes sharded by stage",
          "[zero][lesson][bf16]") {
  const auto single = load_checkpoint_by_name(
      checkpoint_of("single_device", 4, {"--precision", "bf16"}, "single_bf16"));
  for (int stage = 1; stage <= 3; ++stage) {
    INFO("stage " << stage);
    const auto zero = load_checkpoint_by_name(checkpoint_of(
        "zero", 4, {"--stage", std::to_string(stage), "--precision", "bf16"}, "zero_bf16"));
    CHECK(max_difference(zero, single, "param") < kTolerance);
    CHECK(max_difference(zero, single, "optimizer_state") < kTolerance);
  }
  for (const std::string precision : {"bf16", "fp16"})
    for (int stage = 1; stage <= 3; ++stage) {
      INFO(precision << " stage " << stage);
      lessons::CommonOptions c;
      c.ranks = 4, c.layers = 3, c.dim = 16, c.heads = 2, c.seq = 8, c.batch = 8, c.steps = 1;
      c.quiet = true;
      c.precision = precision;
      std::ostringstream out;
      lessons::ZeroRunResult r = lessons::train_zero(c, {.stage = stage}, out);
      REQUIRE(r.peak.size() == 4);
      int64_t owned = 0;
      for (int rank = 0; rank < 4; ++rank) {
        const auto& peak = r.peak[rank];
        owned += r.owned[rank];
        // master 4 + m 4 + v 4 per owned element; 2-byte parameters, whole on every rank until
        // stage 3 shards them; fp32 gradients, whole until stage 2 shards them
        CHECK(peak[static_cast<int>(MemCategory::optimizer_state)] == 12 * r.owned[rank]);
        CHECK(peak[static_cast<int>(MemCategory::parameters)] ==
              2 * (stage == 3 ? r.owned[rank] : r.params));
        CHECK(peak[static_cast<int>(MemCategory::gradients)] ==
              4 * (stage >= 2 ? r.owned[rank] : r.params));
        CHECK(r.owned[rank] >= r.params / 4 - 5);  // 5 units, each chunk at most one more
        CHECK(r.owned[rank] <= r.params / 4 + 5);
      }
      CHECK(owned == r.params);
    }
}

TEST_CASE("zero with recompute writes the checkpoint of zero without it",
          "[zero][lesson][recompute]") {
  const auto none = load_checkpoint_by_name(checkpoint_of("zero", 2, {"--stage", "3"}, "none"));
  const auto full = load_checkpoint_by_name(
      checkpoint_of("zero", 2, {"--stage", "3", "--recompute", "full"}, "full"));
  CHECK(max_difference(full, none, "param") == 0.0f);
  CHECK(max_difference(full, none, "optimizer_state") == 0.0f);
}

TEST_CASE("zero prints the measured memory and wire bytes beside the formulas", "[zero][lesson]") {
  auto args = tiny_run("zero", 4, 2);
  args.erase(std::find(args.begin(), args.end(), "-q"));
  args.insert(args.end(), {"--stage", "3"});
  auto r = run_mgpu(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  // 3 layers, dim 16, vocab 64: Psi = 12,048, so 4 Psi / 4 = 12,048 B of parameters per rank,
  // measured by each rank's allocator beside the formula
  CHECK_THAT(r.out, Catch::Contains("Psi = 12,048 parameters, N = 4"));
  CHECK_THAT(r.out,
             Catch::Contains("parameters           11.77 KiB   11.77 KiB   11.77 KiB   11.77 KiB   "
                             "4 Psi / N = 11.77 KiB"));
  CHECK_THAT(r.out,
             Catch::Contains("optimizer_state      23.53 KiB   23.53 KiB   23.53 KiB   23.53 KiB   "
                             "8 Psi / N = 23.53 KiB"));
  // 3 Psi x 4 B x 3/4 = 108,432 B sent by rank 0, measured from the trace
  CHECK_THAT(r.out, Catch::Contains("sent 105.89 KiB (measured)"));
  CHECK_THAT(r.out, Catch::Contains("x 4 Psi = 105.89 KiB"));
  CHECK_THAT(r.out, Catch::Contains("in Psi: 3.00 x 4 B x (N-1)/N"));
}

TEST_CASE("zero --paper: 7.5B parameters on 64 phantom GPUs at every stage",
          "[zero][lesson][paper]") {
  auto r = run_mgpu({"run", "zero", "--paper"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("Psi = 7.46B parameters on N = 64 GPUs"));
  // measured 2+4+12 = 18 B/param x 7.464e9 = 134.4 GB; stage 3: 18/64 = 2.1 GB
  CHECK_THAT(r.out, Catch::Contains("baseline                 134.4 GB                 119.4 GB"));
  CHECK_THAT(r.out, Catch::Contains("stage 1                   46.2 GB                  31.3 GB"));
  CHECK_THAT(r.out, Catch::Contains("stage 2                   16.8 GB                  16.6 GB"));
  CHECK_THAT(r.out, Catch::Contains("stage 3                    2.1 GB                   1.9 GB"));
  // the bars: 2.5 GB per character, the baseline past the 80 GB mark, stage 3 one character
  CHECK_THAT(r.out, Catch::Contains("baseline   PPPPPPGGGGGGGGGGGGOOOOOOOOOOOOOO|OOOO"));
  CHECK_THAT(r.out, Catch::Contains("stage 3    O 2.1 GB"));
}

TEST_CASE("zero refuses what it cannot run in one line with exit code 2", "[zero][lesson]") {
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  for (const Case& k :
       std::vector<Case>{{{"--stage", "2", "--prefetch", "off"}, "--prefetch applies to stage 3"},
                         {{"--stage", "4"}, "--stage"},
                         {{}, "global batch 7 is not divisible by 4 ranks"},
                         {{"--paper", "--stage", "1"}, "--paper compares every stage"}}) {
    auto args = tiny_run("zero", 4, 1, k.says.starts_with("global") ? 7 : 0);
    args.insert(args.end(), k.extra.begin(), k.extra.end());
    auto r = run_mgpu(args);
    INFO(k.says);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(k.says));
    CHECK(mgpu::testing::count_lines(r.err) == 1);
  }
}

TEST_CASE("zero --prefetch on hides the all-gathers behind compute and off exposes them",
          "[zero][lesson][prefetch]") {
  lessons::CommonOptions c;
  c.ranks = 4, c.steps = 2, c.batch = 16, c.quiet = true;
  std::ostringstream out;
  auto summary = [&](bool prefetch) {
    lessons::ZeroRunResult r = lessons::train_zero(c, {.stage = 3, .prefetch = prefetch}, out);
    return trace::analyze(r.trace, 1);
  };
  const trace::TraceSummary on = summary(true), off = summary(false);
  // the same bytes either way; with prefetch most of the communication runs under compute
  CHECK(on.ranks[0].wire_bytes == off.ranks[0].wire_bytes);
  CHECK(on.ranks[0].overlap_fraction > 0.3);
  CHECK(off.ranks[0].overlap_fraction < on.ranks[0].overlap_fraction);
  CHECK(off.ranks[0].exposed_comm > on.ranks[0].exposed_comm);
  CHECK(off.window.length() > on.window.length());  // modeled clock: deterministic step times
}

TEST_CASE("zero --impl mine on the untouched stub falls back to the reference in one line",
          "[zero][lesson][impl]") {
  auto args = tiny_run("zero", 2, 1);
  args.insert(args.end(), {"--stage", "1", "--impl", "ex08=mine"});
  auto r = run_mgpu(args);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out + r.err, Catch::Contains("ex08 not implemented yet: using the reference"));
}

}  // namespace test_zero_lesson

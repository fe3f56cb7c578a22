// The pipeline lessons through the real command line, in-process: what they print, and one line
// plus exit code 2 for every impossible configuration.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "common/checkpoints.h"
#include "common/first_adamw_step.h"
#include "core/trace/analysis.h"
#include "core/trace/chrome_trace.h"
#include "mgpu_cli.h"

namespace test_pipeline_lesson {

using mgpu::testing::run_mgpu;
using Result = mgpu::testing::CliResult;
static int lines(const std::string& s) {
  return mgpu::testing::count_lines(s);
}
static std::vector<std::string> args(std::vector<std::string> a) {
  return mgpu::testing::with_tiny_model(std::move(a));
}

TEST_CASE("pipeline lesson prints the plan, measured bubble beside theory, memory and timeline",
          "[lesson][pipeline]") {
  Result r = run_mgpu(args({"run", "pipeline", "--theory"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("1F1B: P-s-1 warmup forwards"));
  CHECK_THAT(r.out, Catch::Contains("the plan (simulated"));
  CHECK_THAT(r.out, Catch::Contains("stage 3 |"));
  // Defaults: 4 stages, 8 micro-batches -> 3/11 = 27.3%, measured exactly in theory mode.
  CHECK_THAT(r.out, Catch::Contains("theory (P-1)/(M+P-1) = 3/11"));
  CHECK_THAT(r.out, Catch::Contains("rank 0  bubble measured  27.3%  theory  27.3%"));
  CHECK_THAT(r.out, Catch::Contains("rank 3  bubble measured  27.3%  theory  27.3%"));
  CHECK_THAT(r.out, Catch::Contains("rank 0  held  4 (expected  4)"));
  CHECK_THAT(r.out, Catch::Contains("rank 3  held  1 (expected  1)"));
  CHECK_THAT(r.out, Catch::Contains("timeline of step 2"));
  CHECK_THAT(r.out, Catch::Contains("per rank, step 2"));
}

TEST_CASE("pipeline lesson with a real profile and uneven stages says so", "[lesson][pipeline]") {
  Result r = run_mgpu(args({"run", "pipeline", "--ranks", "3", "--layers", "5", "--schedule",
                            "gpipe", "--microbatches", "4", "--batch", "8"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("stages have 2,2,1 layers (uneven)"));
  CHECK_THAT(r.out, Catch::Contains("the formula assumes equal stages"));
  CHECK_THAT(r.out, Catch::Contains("rank 0  held  4 (expected  4)"));
}

TEST_CASE("model_parallel lesson: one rank busy at a time", "[lesson][pipeline]") {
  Result r = run_mgpu(args({"run", "model_parallel", "--theory"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("theory (P-1)/P = 3/4"));
  CHECK_THAT(r.out, Catch::Contains("bubble measured  75.0%  theory  75.0%"));
}

TEST_CASE("interleaved and zb-h1 run from the command line", "[lesson][pipeline]") {
  Result r = run_mgpu(
      args({"run", "pipeline", "--theory", "--schedule", "interleaved", "--virtual-stages", "2"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("theory (P-1)/(VM+P-1) = 3/19"));
  CHECK_THAT(r.out, Catch::Contains("bubble measured  15.8%  theory  15.8%"));
  // Micro-batches not a multiple of the stages (M=6, P=4): rounds of 6, bubble still the theory.
  Result odd = run_mgpu(args({"run", "pipeline", "--theory", "--schedule", "interleaved",
                              "--virtual-stages", "2", "--microbatches", "6", "--batch", "12"}));
  INFO(odd.err);
  REQUIRE(odd.code == 0);
  CHECK_THAT(odd.out, Catch::Contains("theory (P-1)/(VM+P-1) = 3/15"));
  CHECK_THAT(odd.out, Catch::Contains("rank 0  bubble measured  20.0%  theory  20.0%"));
  CHECK_THAT(odd.out, Catch::Contains("rank 3  bubble measured  20.0%  theory  20.0%"));
  Result z = run_mgpu(args({"run", "pipeline", "--theory", "--schedule", "zb-h1"}));
  CHECK(z.code == 0);
  CHECK_THAT(z.out, Catch::Contains("1 - 3M/(3M+P-1+max(0,P-M)) = 3/27"));
  CHECK_THAT(z.out, Catch::Contains("bubble measured  11.1%  theory  11.1%"));
  CHECK_THAT(z.out, Catch::Contains("W0"));
}

TEST_CASE("zbv and dualpipev run from the command line at their closed-form bubble",
          "[lesson][pipeline]") {
  Result z = run_mgpu(args({"run", "pipeline", "--theory", "--schedule", "zbv"}));
  INFO(z.err);
  REQUIRE(z.code == 0);
  CHECK_THAT(z.out, Catch::Contains("(P-1)F / step = 1.5/25.5"));
  CHECK_THAT(z.out, Catch::Contains("rank 3  bubble measured   5.9%  theory   5.9%"));
  CHECK_THAT(z.out, Catch::Contains("stage 0 also embeds, stage 0 computes the loss"));
  // DualPipe's table beside the run: the trace's bubble in ms, parameters, the stash's peak.
  CHECK_THAT(z.out, Catch::Contains("this run (zbv): bubble 1.5 ms per stage"));
  CHECK_THAT(z.out, Catch::Contains("params 1.00x (all stages / model), peak 8 chunks held"));
  Result d = run_mgpu(args({"run", "pipeline", "--theory", "--schedule", "dualpipev"}));
  INFO(d.err);
  REQUIRE(d.code == 0);
  CHECK_THAT(d.out, Catch::Contains("(PP/2-1)(F&B+B-3W) / step = 3/27"));
  CHECK_THAT(d.out, Catch::Contains("rank 0  bubble measured  11.1%  theory  11.1%"));
  // The formula at this run's PP (2 x 4 devices for the V's half-stage chunks) gives the figure.
  CHECK_THAT(d.out,
             Catch::Contains("DualPipeV  (PP/2-1)(F&B+B-3W)   (8/2-1)(1.5+1-3x0.5)        3"));
  CHECK_THAT(d.out, Catch::Contains("this run (dualpipev): bubble 3 ms per stage"));
  CHECK_THAT(d.out, Catch::Contains("peak 9 chunks held"));
}

TEST_CASE("dualpipe runs from the command line at its closed-form bubble, with two copies",
          "[lesson][pipeline]") {
  Result d = run_mgpu(args({"run", "pipeline", "--theory", "--schedule", "dualpipe"}));
  INFO(d.err);
  REQUIRE(d.code == 0);
  CHECK_THAT(d.out, Catch::Contains("stages 0 and 3 both embed and compute the loss"));
  // (PP/2-1)(F&B+B-3W) at PP = 4, F = 1, B = 2, W = 1 ms: 2 ms of a 2 + 8 x 3 ms step.
  CHECK_THAT(d.out, Catch::Contains("(PP/2-1)(F&B+B-3W) / step = 2/26"));
  CHECK_THAT(d.out, Catch::Contains("rank 0  bubble measured   7.7%  theory   7.7%"));
  CHECK_THAT(d.out, Catch::Contains("rank 3  bubble measured   7.7%  theory   7.7%"));
  CHECK_THAT(d.out, Catch::Contains("rank 1  held  5 (expected  5)"));  // PP + 1
  CHECK_THAT(
      d.out,
      Catch::Contains("DualPipe   (PP/2-1)(F&B+B-3W)   (4/2-1)(3+2-3x1)            2      2x  5"));
  CHECK_THAT(d.out, Catch::Contains("this run (dualpipe): bubble 2 ms per stage"));
  CHECK_THAT(d.out, Catch::Contains("params 2.00x (all stages / model), peak 5 chunks held"));
  // The two copies of each stage sum their gradients: one all-reduce per pair in the trace.
  CHECK_THAT(d.out, Catch::Contains("rank 0  parameters"));
}

TEST_CASE("dualpipe's checkpoint is the single-device model (fp32, bf16), recompute bit for bit",
          "[lesson][pipeline][checkpoint]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "mgpu_test_dualpipe";
  fs::create_directories(dir);
  auto checkpoint = [&](bool pipeline, const std::string& precision, int steps,
                        const std::string& recompute) {
    const std::string tag =
        fmt::format("{}_{}_{}_{}", pipeline ? "dualpipe" : "single", precision, steps, recompute);
    const fs::path path = dir / (tag + ".ckpt");
    std::vector<std::string> a = {"run",        pipeline ? "pipeline" : "single_device",
                                  "--steps",    std::to_string(steps),
                                  "--layers",   "4",
                                  "--dim",      "16",
                                  "--heads",    "2",
                                  "--seq",      "8",
                                  "--batch",    "16",
                                  "-q",         "--precision",
                                  precision,    "--recompute",
                                  recompute,    "--checkpoint",
                                  path.string()};
    if (pipeline)
      a.insert(a.end(), {"--ranks", "4", "--schedule", "dualpipe", "--microbatches", "8"});
    Result r = run_mgpu(a);
    INFO(tag << ": " << r.err);
    REQUIRE(r.code == 0);
    return mgpu::testing::load_checkpoint_by_name(path);
  };
  using mgpu::testing::max_difference;
  // The same gradient summed in another order (each direction's half, then the copies'
  // all-reduce): fp32 within reordering after 3 steps; bf16 after one AdamW step where the
  // arithmetic determines it (first_adamw_step.h: rounding noise in a near-zero gradient moves a
  // weight by up to one update), as every other layout is compared (test_lesson_precision.cpp).
  const auto fp32 = checkpoint(true, "fp32", 3, "none");
  CHECK(max_difference(fp32, checkpoint(false, "fp32", 3, "none"), "param") <= 2e-5f);
  CHECK(max_difference(fp32, checkpoint(false, "fp32", 3, "none"), "optimizer_state") <= 2e-5f);
  const auto bf16 = checkpoint(true, "bf16", 1, "none");
  mgpu::testing::check_first_adamw_step(bf16, checkpoint(false, "bf16", 1, "none"), 3e-3f, 2e-5f);
  for (std::string mode : {"selective", "full"}) {
    INFO("--recompute " << mode);
    CHECK(max_difference(checkpoint(true, "fp32", 3, mode), fp32, "param") == 0.0f);
    CHECK(max_difference(checkpoint(true, "fp32", 3, mode), fp32, "optimizer_state") == 0.0f);
    CHECK(max_difference(checkpoint(true, "bf16", 1, mode), bf16, "param") == 0.0f);
  }
}

TEST_CASE("impossible pipeline configs: one line and exit 2", "[lesson][pipeline]") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--ranks", "9"}, "9 stages need at least 9 layers"},
      {{"--stages", "9"}, "9 stages need at least 9 layers"},
      {{"--microbatches", "0"}, "micro-batches must be at least 1"},
      {{"--schedule", "interleaved", "--virtual-stages", "2", "--microbatches", "2", "--batch",
        "4"},
       "needs at least as many micro-batches as the 4 stages"},
      {{"--schedule", "interleaved", "--virtual-stages", "3"}, "needs at least 12 layers"},
      {{"--virtual-stages", "2"}, "only applies to the interleaved schedule"},
      {{"--microbatches", "3"}, "does not split into 3 micro-batches"},
      {{"--schedule", "pipedream"}, "unknown pipeline schedule 'pipedream'"},
      {{"--stages", "2", "--ranks", "4"}, "one rank per stage"},
      {{"--schedule", "zbv", "--microbatches", "4"}, "zbv with 4 stages needs at least 7"},
      {{"--schedule", "dualpipev", "--microbatches", "4"}, "needs at least 8 micro-batches"},
      {{"--schedule", "dualpipev", "--layers", "6"}, "it needs at least 8 layers"},
      {{"--schedule", "zbv", "--virtual-stages", "2"}, "zbv and dualpipev always use 2 chunks"},
      {{"--schedule", "dualpipe", "--ranks", "3"},
       "dualpipe needs an even number of stages (got 3): use --stages 2 or 4"},
      {{"--schedule", "dualpipe", "--microbatches", "4"},
       "dualpipe with 4 stages needs an even number of micro-batches, at least 8 (got 4)"},
      {{"--schedule", "dualpipe", "--microbatches", "9"}, "use --microbatches 10"},
      // #33: a million micro-batches is refused before anything is allocated.
      {{"--microbatches", "1000000", "--batch", "1000000"}, "more than the 65536"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> a = args({"run", "pipeline"});
    a.insert(a.end(), c.args.begin(), c.args.end());
    CAPTURE(c.args);
    Result r = run_mgpu(a);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
    CHECK(lines(r.err) == 1);
  }
}

TEST_CASE("a billion-parameter model pipelines on phantom GPUs: shapes and times, no memory",
          "[pipeline][phantom]") {
  // 32 layers of width 2048: 1.6B parameters (6.5 GB of fp32 weights if they were real). Only
  // shapes exist, so this must neither allocate the model on the host nor ask phantom tensors for
  // values.
  Result r =
      run_mgpu({"run",     "pipeline", "--device",       "phantom", "--ranks", "8",     "--layers",
                "32",      "--dim",    "2048",           "--heads", "16",      "--seq", "1024",
                "--batch", "16",       "--microbatches", "16",      "--steps", "1"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("1,613,828,096 parameters") && Catch::Contains("parameters"));
  CHECK_THAT(r.out, Catch::Contains("phantom device: timing only"));
  CHECK_THAT(r.out, Catch::Contains("rank 0  held  8 (expected  8)"));
}

// Tied embeddings: the first and the last stage all-reduce the wte gradient over their embedding
// group once per step, vocab x dim x 4 bytes (fp32 gradients), and the middle stages take no part.
TEST_CASE("tied pipeline: one embedding-group all-reduce per step with the embedding's bytes",
          "[lesson][pipeline][tied]") {
  const std::string trace_path = mgpu::testing::temp_path("tied_pipeline_trace.json");
  Result r =
      run_mgpu({"run",     "pipeline", "--ranks",          "4",  "--layers",       "4",
                "--dim",   "16",       "--heads",          "2",  "--seq",          "8",
                "--vocab", "80",       "--batch",          "8",  "--microbatches", "4",
                "--steps", "3",        "--tie-embeddings", "on", "--trace",        trace_path});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const int64_t bytes = 80 * 16 * 4;
  CHECK_THAT(r.out, Catch::Contains("embedding group (tied wte: the first and the last stage)"));
  CHECK_THAT(r.out, Catch::Contains("rank 0  all_reduce of the wte gradient:   5.00 KiB  (vocab 80 "
                                    "x dim 16 x 4 B = 5.00 KiB)"));
  const mgpu::trace::Trace trace = mgpu::trace::read_chrome_trace(trace_path);
  for (const mgpu::trace::Event& e : trace.events)
    if (e.group == "embedding") {
      CHECK(e.op == "all_reduce");
      CHECK(e.bytes == bytes);
    }
  for (int step = 0; step < 3; ++step) {  // one per member in each step's window
    const mgpu::trace::Interval window = mgpu::trace::analysis_window(trace, step);
    std::map<int, int> per_rank;
    for (const mgpu::trace::Event& e : trace.events)
      if (e.group == "embedding" && e.start >= window.begin && e.start < window.end)
        per_rank[e.rank]++;
    INFO("step " << step);
    CHECK(per_rank == std::map<int, int>{{0, 1}, {3, 1}});
  }
  // Untied: no embedding group.
  Result u = run_mgpu(args({"run", "pipeline"}));
  REQUIRE(u.code == 0);
  CHECK_THAT(u.out, !Catch::Contains("embedding group"));
}

}  // namespace test_pipeline_lesson

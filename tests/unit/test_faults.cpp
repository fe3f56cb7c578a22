// Issue #53, the fault lab: injected faults priced by the modeled clock and refused when
// impossible; a straggler's wait, a slow link's ring time, a lost rank and the resume on fewer
// ranks; Young/Daly's interval beside its replay.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/comm/cost_model.h"
#include "core/model/checkpoint.h"
#include "core/runtime/faults.h"
#include "core/theory/checkpoint_interval.h"
#include "exercises/exercises.h"
#include "lessons/ddp.h"
#include "lessons/faults.h"
#include "unit/mgpu_cli.h"

namespace test_faults {

using mgpu::testing::count_lines;
using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {

std::vector<std::string> tiny_ddp(int ranks, int steps, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"run",     "ddp",
                                "--ranks", std::to_string(ranks),
                                "--steps", std::to_string(steps),
                                "--dim",   "16",
                                "--heads", "2",
                                "--seq",   "8",
                                "--batch", "8",
                                "-q"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

mgpu::lessons::CommonOptions tiny_options(int ranks, int steps) {
  mgpu::lessons::CommonOptions c;
  c.ranks = ranks, c.steps = steps, c.dim = 16, c.heads = 2, c.seq = 8, c.batch = 8;
  c.quiet = true;
  c.backend = "local";
  return c;
}

}  // namespace

TEST_CASE("fault texts parse strictly", "[faults]") {
  const mgpu::SlowRank s = mgpu::parse_slow_rank("2:3.5@4");
  CHECK(s.rank == 2);
  CHECK(s.factor == 3.5);
  CHECK(s.from_step == 4);
  CHECK(mgpu::parse_slow_rank("0:2").from_step == 0);
  const mgpu::SlowLink l = mgpu::parse_slow_link("1-3:4");
  CHECK((l.a == 1 && l.b == 3 && l.factor == 4));
  CHECK(mgpu::parse_jitter("5") == Approx(0.05));
  const mgpu::FailRank f = mgpu::parse_fail_rank("1@6");
  CHECK((f.rank == 1 && f.step == 6));
  for (const char* bad : {"", "2", "2:", ":2", "x:2", "2:0", "2:-1", "2:nan", "2:2@", "2:2@x",
                          "-1:2", "2:2x", "2:inf"})
    CHECK_THROWS_AS(mgpu::parse_slow_rank(bad), std::invalid_argument);
  for (const char* bad : {"0-1", "0:1:2", "1-1:2", "a-1:2", "0-1:0", "0-:2"})
    CHECK_THROWS_AS(mgpu::parse_slow_link(bad), std::invalid_argument);
  for (const char* bad : {"-1", "100", "abc", ""})
    CHECK_THROWS_AS(mgpu::parse_jitter(bad), std::invalid_argument);
  for (const char* bad : {"1", "1@", "@2", "1@-2", "a@2"})
    CHECK_THROWS_AS(mgpu::parse_fail_rank(bad), std::invalid_argument);
}

TEST_CASE("an impossible fault is refused with one line and exit code 2", "[faults][cli]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--slow-rank", "4:2"}, "rank 4 does not exist in a run of 4 ranks"},
      {{"--slow-rank", "1:0"}, "the factor must be > 0"},
      {{"--slow-rank", "1:2@9"}, "step 9 is past the end of a run of 3 steps"},
      {{"--slow-rank", "one:2"}, "expected R:F or R:F@S"},
      {{"--slow-link", "0-7:2"}, "rank 7 does not exist"},
      {{"--slow-link", "0-1:-3"}, "the factor must be > 0"},
      {{"--slow-link", "01:3"}, "expected A-B:F"},
      {{"--jitter", "250"}, "0 <= P < 100"},
      {{"--fail-rank", "1@3"}, "step 3 is past the end of a run of 3 steps"},
      {{"--fail-rank", "5@1"}, "rank 5 does not exist"},
      {{"--fail-rank", "1"}, "expected R@S"},
      {{"--slow-rank", "1:2", "--clock", "wall"}, "use --clock modeled"},
      {{"--checkpoint-every", "2"}, "needs --checkpoint FILE"},
  };
  for (const auto& [options, message] : cases) {
    INFO(options.front() << " " << options[1]);
    const auto r = run_mgpu(tiny_ddp(4, 3, options));
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(message));
  }
}

TEST_CASE("a DDP straggler's excess is what every other rank waits", "[faults][straggler]") {
  using namespace mgpu::lessons;
  CommonOptions c = tiny_options(4, 2);
  DataParallelOptions d;
  d.log_losses = false;
  d.overlap = false;
  std::ostringstream out;
  const DataParallelResult base = train_data_parallel(c, d, out);
  c.slow_rank = {"2:3"};
  const DataParallelResult slow = train_data_parallel(c, d, out);
  const StragglerEffect e = straggler_effect(base.trace, slow.trace, 1, 2);
  // Rank 2 computes 3x: twice its own compute beyond the others'.
  CHECK(e.busy_slow[2] > 2.5 * e.busy_base[2]);
  CHECK(std::abs(e.busy_slow[0] - e.busy_base[0]) < 1e-12);
  REQUIRE(e.excess() > 0);
  INFO("excess " << e.excess() << " wait " << e.others_wait() << " step " << e.step_base << " -> "
                 << e.step_slow);
  // The step grows by its excess, within the clock's resolution (1 ns) ...
  CHECK(std::abs(e.step_slow - e.step_base - e.excess()) < 1e-9);
  // ... and the others' added waiting is its excess, less the one ring message each sends
  // before the straggler arrives (alpha + a chunk over the link).
  const mgpu::WorldOptions w = c.world_options();
  const mgpu::LinkSpec& link = w.profile.link(0, 1);
  for (int r : {0, 1, 3}) {
    INFO("rank " << r);
    const double waited = e.wait_slow[r] - e.wait_base[r];
    CHECK(waited <= e.excess() + 1e-9);
    CHECK(waited >= e.excess() - link.latency - 4.0 * 1024 * 1024 / link.achieved_bandwidth());
  }
  // The trace names what was injected.
  REQUIRE(slow.trace.metadata.contains("faults"));
  CHECK(slow.trace.metadata["faults"]["injected"][0] == "rank 2 computes 3x slower");
  CHECK_FALSE(base.trace.metadata.contains("faults"));
}

TEST_CASE("a slow link slows the ring all-reduce as alpha-beta says", "[faults][link]") {
  using namespace mgpu::lessons;
  CommonOptions c = tiny_options(4, 1);
  constexpr int64_t bytes = 16 << 20;
  const double base = timed_ring_all_reduce(c, bytes);
  c.slow_link = {"1-2:4"};
  const double slow = timed_ring_all_reduce(c, bytes);
  const mgpu::HardwareProfile profile = c.world_options().profile;
  const mgpu::LinkSpec& link = profile.link(1, 2);
  const double n = 4;
  const double formula = 2 * (n - 1) * (link.latency + bytes / n * 4 / link.achieved_bandwidth());
  CHECK(slow == Approx(formula).epsilon(1e-9));
  CHECK(base ==
        Approx(2 * (n - 1) * (link.latency + bytes / n / link.achieved_bandwidth())).epsilon(1e-9));
  // The cost model prices the same ring with the same slow link.
  CHECK(mgpu::comm::alpha_beta_time("all_reduce", bytes / 4, 4, 4, profile) ==
        Approx(formula).epsilon(1e-9));
}

TEST_CASE("a lost rank ends the job with one line; the resume on fewer ranks matches",
          "[faults][resume]") {
  const std::string whole = temp_path("faults_whole.ckpt");
  const std::string saved = temp_path("faults_saved.ckpt");
  const std::string after = temp_path("faults_after.ckpt");
  auto r = run_mgpu(tiny_ddp(4, 6, {"--checkpoint", whole}));
  REQUIRE(r.code == 0);
  r = run_mgpu(
      tiny_ddp(4, 6, {"--fail-rank", "1@5", "--checkpoint-every", "2", "--checkpoint", saved}));
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::Contains("rank 1 was lost at step 5"));
  CHECK_THAT(r.err, Catch::Contains("at step 4: resume with --resume " + saved));
  CHECK(mgpu::read_checkpoint_info(saved).step == 4);
  r = run_mgpu(tiny_ddp(2, 6, {"--resume", saved, "--checkpoint", after}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const mgpu::CheckpointContents a = mgpu::load_checkpoint_tensors(whole);
  const mgpu::CheckpointContents b = mgpu::load_checkpoint_tensors(after);
  REQUIRE(a.tensors.size() == b.tensors.size());
  CHECK(b.info.step == 6);
  float worst = 0;
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    REQUIRE(a.tensors[t].name == b.tensors[t].name);
    for (size_t i = 0; i < a.tensors[t].values.size(); ++i)
      worst = std::max(worst, std::abs(a.tensors[t].values[i] - b.tensors[t].values[i]));
  }
  CHECK(worst < 2e-5f);
  for (const auto& p : {whole, saved, after}) std::filesystem::remove(p);
}

TEST_CASE("jitter is seeded: the same seed, the same trace", "[faults][jitter]") {
  using namespace mgpu::lessons;
  CommonOptions c = tiny_options(2, 1);
  c.jitter = "10";
  DataParallelOptions d;
  d.log_losses = false;
  std::ostringstream out;
  const double a = train_data_parallel(c, d, out).step_seconds;
  const double b = train_data_parallel(c, d, out).step_seconds;
  c.jitter.clear();
  const double none = train_data_parallel(c, d, out).step_seconds;
  CHECK(a == b);
  CHECK(a != none);
  CHECK(std::abs(a - none) < 0.1 * none);
}

TEST_CASE("Young/Daly's interval is where the replayed waste is least", "[faults][interval]") {
  const double cost = 60, mtbf = 54.0 * 24 * 3600 / 419;
  const double best = mgpu::reference::young_daly_interval(cost, mtbf);
  CHECK(best == Approx(std::sqrt(2 * cost * mtbf)));
  std::vector<double> waste;
  for (double x : {0.25, 0.5, 1.0, 2.0, 4.0})
    waste.push_back(
        mgpu::theory::simulate_checkpointing(1000 * mtbf, x * best, cost, mtbf, 0, 2024).waste());
  CHECK(std::min_element(waste.begin(), waste.end()) - waste.begin() == 2);
  CHECK(waste[2] == Approx(mgpu::theory::checkpoint_waste(best, cost, mtbf)).epsilon(0.2));
}

}  // namespace test_faults

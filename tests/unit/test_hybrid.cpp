// The hybrid lesson (DP x TP x PP): every 8-rank factorisation, under GPipe and 1F1B, writes the
// single-device model through --checkpoint; its report measures each group's bytes equal to the
// formula; bad meshes are one line and exit 2, naming meshes that work.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/checkpoints.h"
#include "common/first_adamw_step.h"
#include "core/runtime/profile.h"
#include "unit/mgpu_cli.h"

namespace test_hybrid {

using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {
// Runs `args` (which write --checkpoint `path`) and checks the gathered model is `want`: rounding
// only (sums in another order). SGD keeps it near 1e-7 relative; AdamW turns a nearly cancelled
// gradient's absolute rounding d into lr * d / eps per step, which the CPU's GEMM kernels decide:
// under 2e-5 with OpenBLAS's Haswell and Zen kernels, 3e-5 with its AVX-512 ones (SkylakeX,
// Cooperlake), as test_tensor_parallel measures too. A wrong shard is off by whole updates
// (lr 3e-3 per step), 60x AdamW's bound. Returns the run, for checks of its report.
mgpu::testing::CliResult run_to_checkpoint(const std::vector<std::string>& args,
                                           const std::string& path,
                                           const mgpu::testing::CheckpointByName& want) {
  auto r = run_mgpu(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const auto got = mgpu::testing::load_checkpoint_by_name(path);
  const bool sgd = std::find(args.begin(), args.end(), "sgd") != args.end();
  const float bound = sgd ? 2e-5f : 5e-5f;
  CHECK(mgpu::testing::max_difference(got, want, "param") < bound);
  CHECK(mgpu::testing::max_difference(got, want, "optimizer_state") < bound);
  std::remove(path.c_str());
  return r;
}

// 8 heads (tp up to 8), 8 layers (pp up to 8), batch 16 = dp 8 x 2 micro-batches x 1.
std::vector<std::string> tiny(std::vector<std::string> args, const char* heads = "8") {
  for (const char* a : {"--steps", "4", "--dim", "16", "--heads", heads, "--seq", "8", "--batch",
                        "16", "--layers", "8", "-q"})
    args.push_back(a);
  return args;
}

std::vector<std::string> mesh(int dp, int tp, int pp, std::vector<std::string> more = {},
                              int microbatches = 2) {
  std::vector<std::string> args = {
      "run",  "hybrid",           "--ranks",        "8",
      "--dp", std::to_string(dp), "--tp",           std::to_string(tp),
      "--pp", std::to_string(pp), "--microbatches", std::to_string(microbatches)};
  args.insert(args.end(), more.begin(), more.end());
  return tiny(args);
}

// The single-device model after the same `tiny` training (with `more` options), read from its
// --checkpoint: what every hybrid layout must reproduce.
mgpu::testing::CheckpointByName single_device_parameters(
    const std::vector<std::string>& more = {}) {
  const std::string path = temp_path("single_device.ckpt");
  std::vector<std::string> args = {"run", "single_device"};
  args.insert(args.end(), more.begin(), more.end());
  args.insert(args.end(), {"--checkpoint", path});
  const auto r = run_mgpu(tiny(args));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto parameters = mgpu::testing::load_checkpoint_by_name(path);
  std::remove(path.c_str());
  return parameters;
}
}  // namespace

TEST_CASE("hybrid trains every 8-rank mesh to the single-device parameters",
          "[hybrid][lesson][equivalence]") {
  const auto want = single_device_parameters();
  const int meshes[][3] = {{2, 2, 2}, {1, 4, 2}, {2, 1, 4}, {4, 2, 1}, {1, 2, 4},
                           {8, 1, 1}, {1, 1, 8}, {1, 8, 1}, {4, 1, 2}, {2, 4, 1}};
  for (const auto& m : meshes)
    for (std::string schedule : {"gpipe", "1f1b"}) {
      INFO("dp " << m[0] << " tp " << m[1] << " pp " << m[2] << " " << schedule);
      const std::string path = temp_path("hybrid.ckpt");
      run_to_checkpoint(mesh(m[0], m[1], m[2], {"--schedule", schedule, "--checkpoint", path}),
                        path, want);
    }
}

// Each tp slice is drawn at its place in the single-device model and rounded to 2 bytes, the tp
// all-reduces sum partial products in fp32 and round once (as one device's linear does), and
// fp16's loss scale and found-inf flag are agreed over dp, pp and tp: after one step every
// gradient is the single-device one within the fp32 reordering bound the other layouts' precision
// tests use (2e-5), on their model (test_lesson_precision: 4 layers, dim 16, 2 heads, batch 8),
// and so is every parameter whose AdamW update the gradient determines; the few that rounding
// noise moves (first_adamw_step.h: the key bias's gradient is exactly zero in exact arithmetic)
// are counted and bounded by one update.
TEST_CASE("hybrid bf16 and fp16 train to the single-device bf16 and fp16 parameters",
          "[hybrid][lesson][equivalence][precision]") {
  auto run = [](std::vector<std::string> args, const std::string& precision,
                const std::string& checkpoint) {
    for (const char* a : {"--steps", "1", "--layers", "4", "--dim", "16", "--heads", "2", "--seq",
                          "8", "--batch", "8", "-q", "--precision"})
      args.push_back(a);
    args.insert(args.end(), {precision, "--checkpoint", checkpoint});
    return run_mgpu(args);
  };
  const std::vector<std::vector<std::string>> schedules = {
      {"--schedule", "1f1b"},
      {"--schedule", "interleaved", "--virtual-stages", "2"},
      {"--schedule", "zb-h1"}};
  for (const std::string precision : {"bf16", "fp16"})
    for (const auto& schedule : schedules) {
      INFO("--precision " << precision << " " << schedule[1]);
      const std::string single = temp_path("single_" + precision + ".ckpt"),
                        path = temp_path("hybrid_" + precision + ".ckpt");
      REQUIRE(run({"run", "single_device"}, precision, single).code == 0);
      std::vector<std::string> args = {"run",  "hybrid", "--ranks", "8", "--dp",           "2",
                                       "--tp", "2",      "--pp",    "2", "--microbatches", "2"};
      args.insert(args.end(), schedule.begin(), schedule.end());
      auto r = run(args, precision, path);
      INFO(r.err);
      REQUIRE(r.code == 0);
      const auto got = mgpu::testing::load_checkpoint_by_name(path),
                 want = mgpu::testing::load_checkpoint_by_name(single);
      mgpu::testing::check_first_adamw_step(got, want, 3e-3f /* --lr */, 2e-5f);
      // Memory from the allocator: 2-byte weights, fp32 gradients, fp32 master + m + v per local
      // parameter (stage 0: 4,528 of them, stage 1: 4,432), equal to the formula's line.
      CHECK_THAT(r.out,
                 Catch::Contains("stage 0: P_0 = 4,528 -> 8.84 KiB + 17.69 KiB + 53.06 KiB"));
      CHECK_THAT(r.out,
                 Catch::Contains("0 dp0 pp0 tp0         8.84 KiB       17.69 KiB       53.06 KiB"));
      CHECK_THAT(r.out,
                 Catch::Contains("stage 1: P_1 = 4,432 -> 8.66 KiB + 17.31 KiB + 51.94 KiB"));
      CHECK_THAT(r.out,
                 Catch::Contains("7 dp1 pp1 tp1         8.66 KiB       17.31 KiB       51.94 KiB"));
      // pp sends 2-byte activations; tp all-reduces fp32 partial sums (4 B): both equal the formula
      if (schedule[1] != "interleaved")
        CHECK_THAT(r.out, Catch::Contains("tp 16.00 KiB | 16.00 KiB   pp  1.00 KiB |  1.00 KiB"));
      std::remove(single.c_str());
      std::remove(path.c_str());
    }
}

namespace {
// "30.88 KiB" -> bytes
double parse_bytes(const std::string& text) {
  std::istringstream in(text);
  double value = 0;
  std::string unit;
  in >> value >> unit;
  const double scale = unit == "GiB" ? 1 << 30 : unit == "MiB" ? 1 << 20 : unit == "KiB" ? 1024 : 1;
  return value * scale;
}

// The lines of a report that `row` matches: each one's captures, [0] being the whole match.
std::vector<std::vector<std::string>> matching_rows(const std::string& out, const std::regex& row) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) rows.emplace_back(m.begin(), m.end());
  }
  return rows;
}

// The first three columns of the lesson's memory table (allocator peaks).
enum class StateColumn { parameters = 2, gradients = 3, optimizer_state = 4 };

// Each rank's peak bytes of one model state, from the lesson's memory table.
std::map<int, double> state_by_rank(const std::string& out, StateColumn column) {
  // "  0 dp0 pp0 tp0        30.88 KiB       30.88 KiB       61.75 KiB ..."
  const std::regex row(R"(^  (\d+) dp\d pp\d tp\d +(\S+ \S+) +(\S+ \S+) +(\S+ \S+))");
  std::map<int, double> bytes;
  for (const auto& m : matching_rows(out, row))
    bytes[std::stoi(m[1])] = parse_bytes(m[static_cast<int>(column)]);
  return bytes;
}

std::map<int, double> optimizer_state_by_rank(const std::string& out) {
  return state_by_rank(out, StateColumn::optimizer_state);
}
}  // namespace

// ZeRO-1 over dp: the all-reduce's reduce-scatter and all-gather around the optimizer, each dp
// rank updating its chunk of the stage. Same math as the replicated update, so the same
// single-device parameters (fp32 tolerance); a quarter of the optimizer state at dp 4.
TEST_CASE("hybrid zero 1 trains to the single-device parameters with 1/dp of the optimizer state",
          "[hybrid][lesson][equivalence][zero]") {
  const auto want = single_device_parameters();
  const int meshes[][3] = {{2, 2, 2}, {4, 1, 2}, {1, 2, 4}};
  for (const auto& m : meshes) {
    INFO("dp " << m[0] << " tp " << m[1] << " pp " << m[2]);
    const std::string path = temp_path("hybrid_zero.ckpt");
    const auto zero1 = run_to_checkpoint(
        mesh(m[0], m[1], m[2], {"--zero", "1", "--checkpoint", path}), path, want);
    // The allocator's optimizer state per rank: 1/dp of zero 0's (each unit's chunk may hold one
    // element more than numel/dp: within 1%). dp 1: the same.
    auto zero0 = run_mgpu(mesh(m[0], m[1], m[2]));
    REQUIRE(zero0.code == 0);
    const auto sharded = optimizer_state_by_rank(zero1.out),
               whole = optimizer_state_by_rank(zero0.out);
    REQUIRE(sharded.size() == 8);
    REQUIRE(whole.size() == 8);
    for (const auto& [rank, bytes] : whole) {
      INFO("rank " << rank);
      CHECK(bytes > 0);
      CHECK(std::abs(sharded.at(rank) * m[0] - bytes) <= 0.01 * bytes);
    }
  }
}

// ZeRO-2 and ZeRO-3 over dp inside a TP x PP mesh (torchtitan's FSDP x TP x PP): the same
// reduce-scatter and all-gather as ZeRO-1 around the same update, so the same single-device
// parameters; between steps a rank keeps 1/dp of the gradients (ZeRO-2, 3) and of the parameters
// (ZeRO-3), by the allocator's peaks, while ZeRO-2 keeps every parameter whole.
TEST_CASE("hybrid zero 2 and 3 (FSDP x TP x PP) train to the single-device parameters",
          "[hybrid][lesson][equivalence][zero]") {
  const auto want = single_device_parameters();
  const int meshes[][3] = {{2, 2, 2}, {4, 1, 2}};
  for (const auto& m : meshes) {
    auto zero0 = run_mgpu(mesh(m[0], m[1], m[2]));
    REQUIRE(zero0.code == 0);
    for (int zero : {2, 3}) {
      INFO("dp " << m[0] << " tp " << m[1] << " pp " << m[2] << " zero " << zero);
      const std::string path = temp_path("hybrid_zero23.ckpt");
      const auto r = run_to_checkpoint(
          mesh(m[0], m[1], m[2], {"--zero", std::to_string(zero), "--checkpoint", path}), path,
          want);
      for (auto column :
           {StateColumn::parameters, StateColumn::gradients, StateColumn::optimizer_state}) {
        const bool sharded = column != StateColumn::parameters || zero == 3;
        const auto mine = state_by_rank(r.out, column), whole = state_by_rank(zero0.out, column);
        REQUIRE(mine.size() == 8);
        for (const auto& [rank, bytes] : whole) {
          INFO("rank " << rank << " column " << static_cast<int>(column));
          CHECK(bytes > 0);  // a chunk may hold one element more than numel/dp: within 1%
          CHECK(std::abs(mine.at(rank) * (sharded ? m[0] : 1) - bytes) <= 0.01 * bytes);
        }
      }
    }
  }
}

// bf16 from the start: ZeRO-2/3 hold the fp32 masters in the dp chunks and the 2-byte parameters
// in the units (ZeRO-3: only the chunk, gathered whole for the step): after one step the
// single-device bf16 model within the precision tests' bound.
TEST_CASE("hybrid zero 2 and 3 train to the single-device bf16 parameters",
          "[hybrid][lesson][equivalence][zero][precision]") {
  auto run = [](std::vector<std::string> args, const std::string& checkpoint) {
    for (const char* a : {"--steps", "1", "--layers", "4", "--dim", "16", "--heads", "2", "--seq",
                          "8", "--batch", "8", "-q", "--precision", "bf16", "--checkpoint"})
      args.push_back(a);
    args.push_back(checkpoint);
    return run_mgpu(args);
  };
  const std::string single = temp_path("single_zero23_bf16.ckpt"),
                    path = temp_path("hybrid_zero23_bf16.ckpt");
  REQUIRE(run({"run", "single_device"}, single).code == 0);
  const auto want = mgpu::testing::load_checkpoint_by_name(single);
  for (const char* zero : {"2", "3"}) {
    INFO("--zero " << zero);
    auto r = run({"run", "hybrid", "--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2",
                  "--microbatches", "2", "--zero", zero},
                 path);
    INFO(r.err);
    REQUIRE(r.code == 0);
    mgpu::testing::check_first_adamw_step(mgpu::testing::load_checkpoint_by_name(path), want,
                                          3e-3f /* --lr */, 2e-5f);
    std::remove(path.c_str());
  }
  std::remove(single.c_str());
}

TEST_CASE("hybrid zero 1, 2 and 3 resume from a single-device checkpoint in bf16",
          "[hybrid][lesson][equivalence][zero][precision]") {
  // bf16 masters live in the dp chunks: a resume fills them from the full model and rounds them
  // into the whole 2-byte parameters every rank computes with.
  auto run = [](std::vector<std::string> args, const char* steps) {
    for (const char* a : {"--layers", "4", "--dim", "16", "--heads", "2", "--seq", "8", "--batch",
                          "8", "-q", "--precision", "bf16", "--steps"})
      args.push_back(a);
    args.push_back(steps);
    return run_mgpu(args);
  };
  const std::string straight = temp_path("zero_straight.ckpt"), half = temp_path("zero_half.ckpt"),
                    done = temp_path("zero_done.ckpt");
  REQUIRE(run({"run", "single_device", "--checkpoint", straight}, "2").code == 0);
  REQUIRE(run({"run", "single_device", "--checkpoint", half}, "1").code == 0);
  const auto want = mgpu::testing::load_checkpoint_by_name(straight);
  for (const char* zero : {"1", "2", "3"}) {
    INFO("--zero " << zero);
    auto r = run({"run", "hybrid", "--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2",
                  "--microbatches", "2", "--zero", zero, "--resume", half, "--checkpoint", done},
                 "2");
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto got = mgpu::testing::load_checkpoint_by_name(done);
    CHECK(mgpu::testing::max_difference(got, want, "param") <= 2e-5f);
    CHECK(mgpu::testing::max_difference(got, want, "optimizer_state") <= 2e-5f);
  }
  for (auto* p : {&straight, &half, &done}) std::remove(p->c_str());
}

// Interleaved 1F1B gives every stage V chunks of layers (of tensor-parallel blocks); ZB-H1 splits
// each backward into B (input gradient: the column-parallel linears' partial sums all-reduced in
// the tp group, through the block's hooks) and W (weight gradients, later). Same math, so the
// same single-device parameters.
TEST_CASE("hybrid interleaved and zb-h1 train to the single-device parameters",
          "[hybrid][lesson][equivalence][schedule]") {
  const auto want = single_device_parameters();
  const int meshes[][3] = {{1, 2, 4}, {2, 2, 2}, {2, 1, 4}};
  const std::vector<std::vector<std::string>> schedules = {
      {"--schedule", "interleaved", "--virtual-stages", "2"}, {"--schedule", "zb-h1"}};
  for (const auto& m : meshes)
    for (const auto& schedule : schedules) {
      INFO("dp " << m[0] << " tp " << m[1] << " pp " << m[2] << " " << schedule[1]);
      const std::string path = temp_path("hybrid_schedule.ckpt");
      std::vector<std::string> more = schedule;
      more.insert(more.end(), {"--checkpoint", path});
      // M = 4 micro-batches: interleaved needs at least pp of them (batch 16 = dp x 4 x 16/(4dp))
      run_to_checkpoint(mesh(m[0], m[1], m[2], more, 4), path, want);
    }
}

// ZB-V and DualPipeV put two chunks on every stage in a V: stage 0 embeds AND computes the loss.
// DualPipe holds two copies (stages s and pp-1-s all-reduce their gradients after the step).
TEST_CASE("hybrid zbv, dualpipev and dualpipe train to the single-device parameters",
          "[hybrid][lesson][equivalence][schedule]") {
  const auto want = single_device_parameters();
  const int meshes[][4] = {{2, 2, 2, 4}, {1, 2, 4, 8}};  // dp, tp, pp, micro-batches
  for (const auto& m : meshes)
    for (std::string schedule : {"zbv", "dualpipev", "dualpipe"}) {
      INFO("dp " << m[0] << " tp " << m[1] << " pp " << m[2] << " " << schedule);
      const std::string path = temp_path("hybrid_v_schedule.ckpt");
      run_to_checkpoint(
          mesh(m[0], m[1], m[2], {"--schedule", schedule, "--checkpoint", path}, m[3]), path, want);
    }
}

TEST_CASE("hybrid interleaved and zb-h1 measure each group's bytes equal to the formula",
          "[hybrid][lesson][schedule]") {
  // 1 x 2 x 4, M = 4, one micro-batch's activation B_micro*T*C*4 = 4*8*16*4 = 2 KiB.
  // interleaved, V = 2: chunk c of stage s is virtual stage 4c+s; stage 0 sends 3 activations or
  // gradients per micro-batch (12 per step = 24 KiB), stage 1 four (32 KiB).
  auto interleaved =
      run_mgpu(mesh(1, 2, 4, {"--schedule", "interleaved", "--virtual-stages", "2"}, 4));
  INFO(interleaved.err);
  REQUIRE(interleaved.code == 0);
  CHECK_THAT(interleaved.out, Catch::Contains("theory (P-1)/(VM+P-1) = 3/11"));
  CHECK_THAT(interleaved.out, Catch::Contains("GPU 0  dp0 pp0 tp0  tp 64.00 KiB | 64.00 KiB   pp "
                                              "24.00 KiB | 24.00 KiB"));
  CHECK_THAT(interleaved.out, Catch::Contains("GPU 2  dp0 pp1 tp0  tp 64.00 KiB | 64.00 KiB   pp "
                                              "32.00 KiB | 32.00 KiB"));
  // zb-h1: the tp group's 4 all-reduces per layer and micro-batch, 2 of them in B
  auto zb = run_mgpu(mesh(1, 2, 4, {"--schedule", "zb-h1"}, 4));
  INFO(zb.err);
  REQUIRE(zb.code == 0);
  CHECK_THAT(zb.out, Catch::Contains("theory 1 - 3M/(3M+P-1+max(0,P-M)) = 3/15"));
  CHECK_THAT(zb.out, Catch::Contains("GPU 2  dp0 pp1 tp0  tp 64.00 KiB | 64.00 KiB   pp "
                                     "16.00 KiB | 16.00 KiB"));
}

// The cp axis: every sequence split zigzag over the cp group inside each stage, attention's K|V
// round the cp ring (ring attention), gradients averaged over cp. In fp32 the same math, so the
// single-device parameters; the ring's and the cp all-reduce's bytes equal the formula.
TEST_CASE("hybrid with cp trains to the single-device parameters", "[hybrid][lesson][cp]") {
  const auto want = single_device_parameters();
  const std::vector<std::vector<std::string>> cases = {
      {"--dp", "1", "--tp", "2", "--cp", "2", "--pp", "2"},
      {"--dp", "2", "--tp", "1", "--cp", "2", "--pp", "2"},
      {"--dp", "1", "--tp", "1", "--cp", "4", "--pp", "2"},
      {"--dp", "2", "--tp", "2", "--cp", "2", "--pp", "1", "--zero", "1"},
      {"--dp", "1", "--tp", "2", "--cp", "2", "--pp", "2", "--schedule", "zb-h1"},
      {"--dp", "1", "--tp", "2", "--cp", "2", "--pp", "2", "--recompute", "full"}};
  for (const auto& mesh_args : cases) {
    std::vector<std::string> args = {"run", "hybrid", "--ranks", "8", "--microbatches", "2"};
    args.insert(args.end(), mesh_args.begin(), mesh_args.end());
    const std::string path = temp_path("hybrid_cp.ckpt");
    args.insert(args.end(), {"--checkpoint", path});
    const auto r = run_to_checkpoint(tiny(args), path, want);
    // every GPU's cp bytes (ring K|V and dK|dV hops, then the gradient all-reduce) = formula
    const auto rows =
        matching_rows(r.out, std::regex(R"(GPU +\d+ .* cp +(\S+ \S+) \| +(\S+ \S+)$)"));
    for (const auto& m : rows) {
      INFO(m[0]);
      CHECK(m[1] == m[2]);
      CHECK(m[1] != "0 B");
    }
    CHECK(rows.size() == 8);
  }
}

// Megatron's options (#30): sequence parallelism in the blocks (the pipeline's messages then carry
// T/tp tokens) and the vocabulary-parallel head (lm_head split by rows: the checkpoint is still
// the single-device [V, C] matrix); fp32, so the TP sums' type does not change the numbers.
TEST_CASE(
    "hybrid with --sp and the vocabulary-parallel head trains to the single-device parameters",
    "[hybrid][lesson][equivalence][sp]") {
  const auto want = single_device_parameters();
  const std::vector<std::vector<std::string>> cases = {
      {"--dp", "2", "--tp", "2", "--pp", "2", "--sp"},
      {"--dp", "2", "--tp", "2", "--pp", "2", "--vocab-parallel-head"},
      {"--dp", "1", "--tp", "2", "--pp", "4", "--sp", "--vocab-parallel-head"},
      {"--dp", "1", "--tp", "4", "--pp", "2", "--sp", "--vocab-parallel-head", "--schedule",
       "interleaved", "--virtual-stages", "2"},
      {"--dp", "2", "--tp", "2", "--pp", "2", "--vocab-parallel-head", "--schedule", "zb-h1"},
      {"--dp", "2", "--tp", "2", "--pp", "2", "--sp", "--zero", "1", "--recompute", "full"}};
  for (const auto& mesh_args : cases) {
    std::vector<std::string> args = {"run", "hybrid", "--ranks", "8", "--microbatches", "4"};
    args.insert(args.end(), mesh_args.begin(), mesh_args.end());
    std::string shown;
    for (const auto& a : mesh_args) shown += a + " ";
    INFO(shown);
    const std::string path = temp_path("hybrid_sp.ckpt");
    args.insert(args.end(), {"--checkpoint", path});
    const auto r = run_to_checkpoint(tiny(args), path, want);
    // every GPU's tp and pp bytes (SP's halves and extra gathers, the head's collectives, T/tp
    // tokens per pp message) = the formula
    const auto rows = matching_rows(
        r.out,
        std::regex(R"(GPU +\d+ .* tp +(\S+ \S+) \| +(\S+ \S+) +pp +(\S+ \S+) \| +(\S+ \S+))"));
    CHECK(rows.size() == 8);
    for (const auto& m : rows) {
      INFO(m[0]);
      CHECK(m[1] == m[2]);
      CHECK(m[3] == m[4]);
    }
  }
}

TEST_CASE("hybrid refuses --sp and the vocabulary-parallel head where they cannot run",
          "[hybrid][lesson][sp]") {
  const std::vector<std::pair<std::vector<std::string>, const char*>> bad = {
      {mesh(4, 1, 2, {"--sp"}), "use --tp 2 or more, or drop --sp"},
      {mesh(4, 1, 2, {"--vocab-parallel-head"}), "use --tp 2 or more, or drop --vocab"},
      {mesh(2, 2, 2, {"--sp", "--schedule", "zb-h1"}), "--sp has no split backward for zb-h1"},
      {mesh(2, 2, 2, {"--vocab-parallel-head", "--tie-embeddings", "on"}), "tied embeddings"},
      {mesh(2, 2, 2, {"--tp-sums", "bf16"}), "--tp-sums"},
      {mesh(2, 2, 2, {"--tp-sums", "activations", "--precision", "bf16"}),
       "use --device phantom, or --tp-sums fp32"},
      {mesh(2, 2, 2, {"--tp-sums", "activations"}), "under --precision fp32 is fp32 already"},
      {mesh(2, 2, 2, {"--sp", "--experts", "4"}), "--sp with experts is not supported"}};
  for (const auto& [args, says] : bad) {
    auto r = run_mgpu(args);
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(says));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("hybrid resumes from a single-device checkpoint and back",
          "[hybrid][lesson][equivalence]") {
  auto steps = [](std::vector<std::string> args, const char* n) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--steps") args[i + 1] = n;
    return args;
  };
  const std::string half = temp_path("half.ckpt"), done = temp_path("done.ckpt");
  const auto want = single_device_parameters();
  // 2 single-device steps, then 2 hybrid steps == 4 single-device steps
  REQUIRE(run_mgpu(steps(tiny({"run", "single_device", "--checkpoint", half}), "2")).code == 0);
  auto r = run_mgpu(mesh(2, 2, 2, {"--resume", half, "--checkpoint", done}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(mgpu::testing::max_difference(mgpu::testing::load_checkpoint_by_name(done), want, "param") <
        2e-5f);
  // and back: 2 hybrid steps, then 2 single-device steps
  REQUIRE(run_mgpu(steps(mesh(1, 4, 2, {"--checkpoint", half}), "2")).code == 0);
  REQUIRE(run_mgpu(tiny({"run", "single_device", "--resume", half, "--checkpoint", done})).code ==
          0);
  CHECK(mgpu::testing::max_difference(mgpu::testing::load_checkpoint_by_name(done), want, "param") <
        2e-5f);
  CHECK(mgpu::testing::max_difference(mgpu::testing::load_checkpoint_by_name(done), want,
                                      "optimizer_state") < 2e-5f);
  for (auto* p : {&half, &done}) std::remove(p->c_str());
}

TEST_CASE(
    "hybrid with --recompute trains to the single-device parameters and counts the "
    "recomputed all-reduces",
    "[hybrid][lesson][equivalence]") {
  for (std::string recompute : {"selective", "full"}) {
    INFO("--recompute " << recompute);
    const auto want = single_device_parameters({"--recompute", recompute});
    const std::string path = temp_path("hybrid_" + recompute + ".ckpt");
    const auto r = run_to_checkpoint(
        mesh(2, 2, 2, {"--recompute", recompute, "--checkpoint", path}), path, want);
    // 8 layers / 2 stages x 2 micro-batches x 2 KiB: 4 all-reduces = 64 KiB, full recompute's 6
    CHECK_THAT(r.out, Catch::Contains(recompute == "full" ? "tp 96.00 KiB | 96.00 KiB"
                                                          : "tp 64.00 KiB | 64.00 KiB"));
  }
}

TEST_CASE("hybrid measures each group's bytes equal to its formula", "[hybrid][lesson]") {
  auto r = run_mgpu(mesh(2, 2, 2));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // "  GPU 5  dp0 pp1 tp1  tp 32.00 KiB | 32.00 KiB   pp ... | ...   dp ... | ..."
  const std::regex row(
      R"(GPU (\d+) +dp\d pp\d tp\d +tp +(\S+ \S+) \| +(\S+ \S+) +pp +(\S+ \S+) \| +(\S+ \S+) +dp +(\S+ \S+) \| +(\S+ \S+))");
  const auto rows = matching_rows(r.out, row);
  for (const auto& m : rows) {
    INFO(m[0]);
    CHECK(m[2] == m[3]);  // tp: 4 all-reduces per layer per micro-batch
    CHECK(m[4] == m[5]);  // pp: one activation and one gradient per micro-batch and neighbour
    CHECK(m[6] == m[7]);  // dp: one ring all-reduce of the stage's gradients per step
    CHECK(m[2] != "0 B");
    CHECK(m[4] != "0 B");
    CHECK(m[6] != "0 B");
  }
  CHECK(rows.size() == 8);
  CHECK_THAT(r.out, Catch::Contains("theory (P-1)/(M+P-1) = 1/3"));
  // Model states: stage 0 = embeddings (64+8)*16 + 4 layers x (6*16 + (12*256+7*16)/2) = 7,904
  // parameters; the allocator's peaks equal the formula (AdamW: 8 B per parameter).
  CHECK_THAT(r.out, Catch::Contains("stage 0: P_0 = 7,904 -> 30.88 KiB + 30.88 KiB + 61.75 KiB"));
  CHECK_THAT(r.out,
             Catch::Contains("0 dp0 pp0 tp0        30.88 KiB       30.88 KiB       61.75 KiB"));
  // stage 1: 4 layers + the head (64+2)*16 = 7,808
  CHECK_THAT(r.out, Catch::Contains("stage 1: P_1 = 7,808 -> 30.50 KiB + 30.50 KiB + 61.00 KiB"));
  CHECK_THAT(r.out,
             Catch::Contains("7 dp1 pp1 tp1        30.50 KiB       30.50 KiB       61.00 KiB"));
}

TEST_CASE("hybrid prints who is who on the mesh", "[hybrid][lesson]") {
  std::vector<std::string> args = mesh(2, 2, 2);
  args.erase(std::find(args.begin(), args.end(), "-q"));
  auto r = run_mgpu(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // tp fastest, then dp, then pp
  CHECK_THAT(r.out, Catch::Contains("GPU 5  dp0 pp1 tp1"));
  CHECK_THAT(r.out, Catch::Contains("tp groups: {0,1} {2,3} {4,5} {6,7}"));
  CHECK_THAT(r.out, Catch::Contains("pp groups: {0,4} {1,5} {2,6} {3,7}"));
  CHECK_THAT(r.out, Catch::Contains("dp groups: {0,2} {1,3} {4,6} {5,7}"));
  CHECK_THAT(r.out, Catch::Contains("every group is inside one node of 8xH100-NVLink"));
}

TEST_CASE("hybrid says which groups cross nodes, and when tp does", "[hybrid][lesson]") {
  // 8 GPUs on nodes of 4 (a profile file): the pp groups {0,4}.. cross, the tp pairs do not.
  const std::string profile = "hybrid_nodes_of_4.json";
  {
    nlohmann::json p = mgpu::HardwareProfile::load("2x8xH100-IB").to_json();
    p["name"] = "nodes-of-4";
    p["ranks_per_node"] = 4;
    std::ofstream(profile) << p.dump();
  }
  std::vector<std::string> args = mesh(2, 2, 2, {"--profile", profile});
  args.erase(std::find(args.begin(), args.end(), "-q"));
  auto r = run_mgpu(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("tp groups: {0,1} {2,3} {4,5} {6,7}\n"));
  CHECK_THAT(r.out, Catch::Contains("pp groups: {0,4}* {1,5}* {2,6}* {3,7}*"));
  CHECK_THAT(r.out, Catch::Contains("(* crosses nodes: 4 GPUs per node on nodes-of-4"));
  CHECK_THAT(r.out, !Catch::Contains("tp groups cross nodes"));
  // tp 8 on nodes of 4: every tp group crosses, and the lesson says so.
  args = mesh(1, 8, 1, {"--profile", profile});
  args.erase(std::find(args.begin(), args.end(), "-q"));
  r = run_mgpu(args);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("tp groups: {0,1,2,3,4,5,6,7}*"));
  CHECK_THAT(r.out,
             Catch::Contains("1 of 1 tp groups cross nodes (4 GPUs per node on nodes-of-4)"));
  std::remove(profile.c_str());
}

TEST_CASE("hybrid refuses a bad mesh in one line, naming meshes that work", "[hybrid][lesson]") {
  struct Bad {
    std::vector<std::string> args;
    const char* says;
    const char* works;  // one of the meshes the line names
  };
  const std::vector<Bad> bad = {
      {mesh(2, 2, 1), "holds 4 ranks but the world has 8", "--dp 2 --tp 2 --pp 2"},
      {tiny({"run", "hybrid", "--ranks", "8", "--tp", "8", "--pp", "1"}, "4"),
       "--tp 8 does not divide the 4 heads", "--dp 2 --tp 4 --pp 1"},
      {tiny({"run", "hybrid", "--ranks", "6", "--dp", "2", "--tp", "1", "--pp", "3"}),
       "--pp 3 does not divide the 8 layers", "--dp 3 --tp 1 --pp 2"},
  };
  for (const Bad& b : bad) {
    auto r = run_mgpu(b.args);
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(b.says));
    CHECK_THAT(r.err, Catch::Contains("meshes that work"));
    CHECK_THAT(r.err, Catch::Contains(b.works));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  auto sgd16 = run_mgpu(mesh(2, 2, 2, {"--precision", "bf16", "--optimizer", "sgd"}));
  CHECK(sgd16.code == 2);
  CHECK_THAT(sgd16.err, Catch::Contains("use --optimizer adamw or --precision fp32"));
  auto schedule = run_mgpu(mesh(2, 2, 2, {"--schedule", "naive"}));
  CHECK(schedule.code == 2);
  CHECK_THAT(schedule.err, Catch::Contains("zbv, dualpipev or dualpipe, got 'naive'"));
  // #33: a million micro-batches is refused before its schedule is built (phantom: no host check).
  const auto million = run_mgpu(std::vector<std::string>{
      "run", "hybrid", "--microbatches", "1000000", "--batch", "1000000", "--device", "phantom"});
  CHECK(million.code == 2);
  CHECK_THAT(million.err, Catch::Contains("more than the 65536 a schedule can hold"));
  auto chunks = run_mgpu(mesh(1, 2, 4, {"--schedule", "interleaved", "--virtual-stages", "3"}, 4));
  CHECK(chunks.code == 2);
  CHECK_THAT(chunks.err, Catch::Contains("pp x V dividing the 8 layers (got pp 4 x V 3): use "
                                         "--virtual-stages 2"));
  auto few = run_mgpu(mesh(1, 2, 4, {"--schedule", "interleaved", "--virtual-stages", "2"}, 2));
  CHECK(few.code == 2);
  CHECK_THAT(few.err, Catch::Contains("needs at least as many micro-batches as the 4 stages"));
  auto virtual_1f1b = run_mgpu(mesh(2, 2, 2, {"--virtual-stages", "2"}));
  CHECK(virtual_1f1b.code == 2);
  CHECK_THAT(virtual_1f1b.err, Catch::Contains("only applies to the interleaved schedule"));
  for (const auto* r : {&schedule, &chunks, &few, &virtual_1f1b})
    CHECK(std::count(r->err.begin(), r->err.end(), '\n') == 1);
  auto cp = run_mgpu(tiny({"run", "hybrid", "--ranks", "8", "--dp", "1", "--tp", "1", "--pp", "1",
                           "--cp", "8", "--microbatches", "2"}));
  CHECK(cp.code == 2);
  CHECK_THAT(cp.err, Catch::Contains("--seq 8 does not split into 16 equal chunks"));
  CHECK(std::count(cp.err.begin(), cp.err.end(), '\n') == 1);
  auto cp_mesh = run_mgpu(
      tiny({"run", "hybrid", "--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2", "--cp", "2"}));
  CHECK(cp_mesh.code == 2);
  CHECK_THAT(cp_mesh.err, Catch::Contains("--dp 1 --tp 2 --pp 2 --cp 2"));
  auto zero = run_mgpu(mesh(2, 2, 2, {"--zero", "4"}));
  CHECK(zero.code == 2);
  CHECK_THAT(zero.err, Catch::Contains("hybrid runs --zero 0 (gradients all-reduced over dp) or "
                                       "1, 2, 3 (ZeRO-1/2/3 over dp), got 4"));
  auto batch = run_mgpu(mesh(2, 2, 2, {}, 3));
  CHECK(batch.code == 2);
  CHECK_THAT(batch.err, Catch::Contains("does not split into dp 2 x 3 micro-batches"));
}

// Experts: each MoE block's 4 experts split over ep ranks carved out of dp (tokens travel to them
// by all-to-all), with tp (whole experts on every tp rank) and pp around them; expert gradients
// summed over edp and divided by dp, dense ones averaged over dp: the single-device MoE model.
// SGD on every mesh; AdamW (whose 1/sqrt(v) amplifies the rounding of tiny gradients) on dp 4
// pp 2 ep 2, as the dense meshes' test runs it.
TEST_CASE("hybrid with experts trains to the single-device parameters (ep with dp and tp and pp)",
          "[hybrid][lesson][equivalence][moe]") {
  struct EpMesh {
    int dp, tp, pp, ep;
    const char* optimizer;
  };
  for (const EpMesh m : {EpMesh{4, 1, 2, 2, "sgd"}, EpMesh{2, 2, 2, 2, "sgd"},
                         EpMesh{8, 1, 1, 4, "sgd"}, EpMesh{4, 1, 2, 2, "adamw"}}) {
    INFO(m.optimizer << " dp " << m.dp << " tp " << m.tp << " pp " << m.pp << " ep " << m.ep);
    std::vector<std::string> more = {"--experts", "4", "--top-k", "2", "--optimizer", m.optimizer};
    const auto want = single_device_parameters(more);
    const std::string path = temp_path("hybrid_moe.ckpt");
    more.insert(more.end(), {"--ep", std::to_string(m.ep), "--checkpoint", path});
    run_to_checkpoint(mesh(m.dp, m.tp, m.pp, more), path, want);
  }
}

TEST_CASE("hybrid refuses what experts do not run with, in one line", "[hybrid][lesson][moe]") {
  auto refused = [](std::vector<std::string> more, const char* says) {
    const auto r = run_mgpu(mesh(4, 1, 2, std::move(more)));
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::Contains(says));
  };
  refused({"--ep", "2"}, "this model is dense");
  refused({"--experts", "4", "--ep", "3"}, "use ep = 1, 2, 4");
  refused({"--experts", "4", "--ep", "2", "--zero", "1"}, "use --zero 0");
  refused({"--experts", "4", "--ep", "2", "--schedule", "zb-h1"}, "use --schedule 1f1b");
}

}  // namespace test_hybrid

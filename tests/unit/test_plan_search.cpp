// The planner's search (core/plan/search.h) and `mgpu plan`: the layouts it enumerates (counted by
// hand on a small model), pins, what it says when nothing fits the pins, ranking and rejection,
// refusals by the engine, and the command's text, JSON and bad input.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/plan/search.h"
#include "core/world/world.h"
#include "exercises/exercises.h"
#include "unit/mgpu_cli.h"

namespace test_plan_search {

using namespace mgpu;
using namespace mgpu::plan;
using mgpu::testing::count_lines;
using mgpu::testing::run_mgpu;

namespace {

GPTConfig small_model() {
  GPTConfig m;
  m.layers = 4;
  m.heads = 4;
  m.dim = 16;  // MLP width 64
  m.seq_len = 8;
  m.vocab = 32;
  return m;
}

Pins fp32_only() {
  Pins p;
  p.precisions = {"fp32"};
  return p;
}

}  // namespace

TEST_CASE("plan enumerates every valid layout of a small model (counted by hand)", "[plan]") {
  // 4 GPUs, cp 1: meshes (tp, pp, dp) = (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1). Per mesh:
  // micro-batch sizes dividing 8 / dp; when pp > 1 gpipe, 1f1b and zb-h1, plus interleaved (V 2)
  // where pp x 2 divides the 4 layers and M >= pp (pp 2: M 4 and 2 of (1,2,2), M 8, 4, 2 of
  // (2,2,1)), plus zbv (M >= 2pp-1) and dualpipev (M >= 2pp) where 2 x pp divides the layers
  // (pp 2: M 4 of (1,2,2), M 8 and 4 of (2,2,1), each twice), plus dualpipe (even pp, even
  // M >= 2pp: M 4 of (1,2,2), M 8 and 4 of (2,2,1), M 8 of (1,4,1)); x 2 ZeRO stages when dp > 1;
  // x 3 recompute modes: 12 + (9 + 2 + 2 + 1) x 6 + 12 x 3 + 18 + (12 + 3 + 4 + 2) x 3 + 12 + 3
  // = 228.
  Pins pins = fp32_only();
  pins.cp = 1;
  const std::vector<Layout> all = enumerate_layouts(small_model(), 4, 8, pins);
  CHECK(all.size() == 228);
  for (const Layout& l : all) {
    CHECK(l.gpus() == 4);
    CHECK(l.global_batch() == 8);
    CHECK(small_model().heads % l.tp == 0);
    CHECK(small_model().layers % l.pp == 0);
  }
  // cp 2 and 4 split the 8 tokens into 2 cp zigzag chunks: they add layouts.
  pins.cp.reset();
  CHECK(enumerate_layouts(small_model(), 4, 8, pins).size() > 228);
  // Precision "any": three times as many.
  pins.cp = 1;
  pins.precisions = {"fp32", "bf16", "fp16"};
  CHECK(enumerate_layouts(small_model(), 4, 8, pins).size() == 3 * 228);
}

TEST_CASE("plan pins fix an axis and search the rest", "[plan]") {
  Pins pins = fp32_only();
  pins.cp = 1;
  pins.tp = 2;
  pins.schedule = "1f1b";
  pins.recompute = "none";
  // (tp 2, pp 1, dp 2): 3 micro-batch sizes x 2 ZeRO; (tp 2, pp 2, dp 1): 4 sizes x 1.
  const std::vector<Layout> pinned = enumerate_layouts(small_model(), 4, 8, pins);
  CHECK(pinned.size() == 10);
  for (const Layout& l : pinned) {
    CHECK(l.tp == 2);
    CHECK(l.schedule == "1f1b");
    CHECK(l.recompute == "none");
  }
  pins.microbatch_size = 2;
  pins.zero = 0;
  for (const Layout& l : enumerate_layouts(small_model(), 4, 8, pins)) {
    CHECK(l.microbatch_size == 2);
    CHECK(l.microbatches * l.microbatch_size * l.dp == 8);
    CHECK(l.zero == 0);
  }
}

TEST_CASE("plan pins V, sp, the vocabulary head and ZeRO 0..3, and names what it pinned",
          "[plan]") {
  GPTConfig m = small_model();
  m.layers = 8;  // pp 2: interleaved with V 2 or 4 (pp x V divides the layers)
  Pins pins = fp32_only();
  pins.cp = 1;
  pins.pp = 2;
  pins.schedule = "interleaved";
  pins.recompute = "none";
  std::set<int> unpinned;
  for (const Layout& l : enumerate_layouts(m, 4, 8, pins)) unpinned.insert(l.virtual_stages);
  CHECK(unpinned == std::set<int>{2, 4});  // searched: every V the layers allow
  pins.virtual_stages = 4;
  const std::vector<Layout> v4 = enumerate_layouts(m, 4, 8, pins);
  REQUIRE(!v4.empty());
  for (const Layout& l : v4) CHECK(l.virtual_stages == 4);
  CHECK_THAT(describe(v4.front()), Catch::Contains("interleaved V 4"));
  pins.virtual_stages = 3;
  CHECK_THROWS_WITH(
      enumerate_layouts(m, 4, 8, pins),
      Catch::Contains("--virtual-stages 3") && Catch::Contains("--virtual-stages 2, 4 would work"));

  // Sequence parallelism and the vocabulary-parallel head: unpinned, on where the engine runs
  // them (tp 2 divides the 8 tokens and the 32-token vocabulary); pinned, as pinned.
  Pins tp2 = fp32_only();
  tp2.cp = 1;
  tp2.tp = 2;
  tp2.schedule = "1f1b";
  for (const Layout& l : enumerate_layouts(m, 4, 8, tp2)) CHECK((l.sp && l.vocab_parallel_head));
  tp2.sp = false;
  tp2.vocab_head = false;
  for (const Layout& l : enumerate_layouts(m, 4, 8, tp2)) CHECK((!l.sp && !l.vocab_parallel_head));
  tp2.sp = true;
  tp2.vocab_head = true;
  for (const Layout& l : enumerate_layouts(m, 4, 8, tp2)) CHECK((l.sp && l.vocab_parallel_head));
  GPTConfig one_head = m;  // tp 1 only: neither runs, whatever else is pinned
  one_head.heads = 1;
  Pins sp_on = fp32_only();
  sp_on.sp = true;
  CHECK_THROWS_WITH(
      enumerate_layouts(one_head, 4, 8, sp_on),
      Catch::Contains("--sp on: the engine runs it on none") && Catch::Contains("use --sp off"));

  // ZeRO: 0 and 1 searched (1 where dp > 1); 2 and 3 when pinned.
  Pins zero = fp32_only();
  zero.cp = 1;
  std::set<int> stages;
  for (const Layout& l : enumerate_layouts(m, 4, 8, zero)) stages.insert(l.zero);
  CHECK(stages == std::set<int>{0, 1});
  for (int stage : {2, 3}) {
    zero.zero = stage;
    for (const Layout& l : enumerate_layouts(m, 4, 8, zero)) CHECK(l.zero == stage);
  }

  // What was pinned and what searched, as the command line names them.
  const Knobs k = knobs(tp2);
  using Pinned = std::pair<std::string, std::string>;
  for (const Pinned& p : {Pinned{"--tp", "2"}, Pinned{"--sp", "on"}, Pinned{"--vocab-head", "on"},
                          Pinned{"--precision", "fp32"}})
    CHECK(std::find(k.pinned.begin(), k.pinned.end(), p) != k.pinned.end());
  for (const char* option : {"--dp", "--pp", "--virtual-stages", "--zero", "--recompute"})
    CHECK(std::find(k.searched.begin(), k.searched.end(), option) != k.searched.end());
  CHECK(k.defaults.empty());  // fp32 pinned: nothing is left at a default
}

TEST_CASE("plan says which pinned values would work when none does", "[plan]") {
  Pins pins = fp32_only();
  pins.tp = 3;
  CHECK_THROWS_WITH(enumerate_layouts(small_model(), 4, 8, pins),
                    Catch::Contains("--tp 3 (4 heads, MLP width 64)") &&
                        Catch::Contains("--tp 1, 2, 4 would work"));
  pins.tp.reset();
  pins.pp = 3;
  CHECK_THROWS_WITH(enumerate_layouts(small_model(), 6, 6, pins),
                    Catch::Contains("--pp 3") && Catch::Contains("--pp 1, 2 would work"));
  // One layer, one head: only dp and cp (zigzag: 2 cp chunks of the 8 tokens, cp <= 4) split 8
  // GPUs, so dp is 2, 4 or 8 and a global batch of 3 splits over none.
  GPTConfig narrow = small_model();
  narrow.layers = 1;
  narrow.heads = 1;
  CHECK_THROWS_WITH(enumerate_layouts(narrow, 8, 3, fp32_only()),
                    Catch::Contains("global batch 3 splits over none") &&
                        Catch::Contains("(2, 4, 8)") && Catch::Contains("--global-batch 4"));
  CHECK_THROWS_WITH(enumerate_layouts(small_model(), 0, 8, fp32_only()),
                    Catch::Contains("--gpus must be positive"));
}

TEST_CASE("plan ranks by simulated tokens/s and rejects over capacity and skips what is refused",
          "[plan]") {
  SearchRequest r;
  r.workload.model = small_model();
  r.workload.seams = reference::seams().hybrid();
  r.gpus = 4;
  r.global_batch = 8;
  r.profile = HardwareProfile::load("DGX-H100");  // 80 GiB: the screen passes this tiny model
  const int64_t GiB = int64_t{1} << 30;
  r.pins = fp32_only();
  r.pins.cp = 1;
  r.max_simulated = 250;  // all of them
  r.rejected_probes = 0;
  int calls = 0;
  // A stand-in engine: refuses ZeRO-1, predicts more tokens/s for more tensor parallelism and
  // more memory than the capacity for pp 1.
  auto fake = [&](const Workload&, const Layout& l, const HardwareProfile&) {
    ++calls;
    if (l.zero == 1) throw std::invalid_argument("zero 1 is not supported yet");
    Prediction p;
    p.tokens_per_s = 100.0 * l.tp + l.microbatch_size;
    p.memory_peak_total = l.pp == 1 ? 100 * GiB : 50 * GiB;
    return p;
  };
  const SearchResult result = search(r, {}, fake);
  CHECK(result.enumerated == 228);
  REQUIRE(!result.ranked.empty());
  for (size_t i = 1; i < result.ranked.size(); ++i)
    CHECK(result.ranked[i - 1].prediction.tokens_per_s >= result.ranked[i].prediction.tokens_per_s);
  for (const Simulated& s : result.ranked) {
    CHECK(s.fits);
    CHECK(s.layout.pp > 1);
    CHECK(s.layout.zero == 0);
  }
  CHECK(result.ranked[0].layout.tp == 2);  // tp 4 means pp 1 here: over capacity
  REQUIRE(!result.rejected.empty());
  for (const Simulated& s : result.rejected) {
    CHECK(s.layout.pp == 1);
    CHECK_THAT(s.why, Catch::Contains("out of memory"));
  }
  REQUIRE(result.refused.count("zero 1 is not supported yet") == 1);
  // One engine call per refused mesh and option set, not one per micro-batching: the ZeRO-1
  // meshes (dp 4 tp 1 pp 1: 3 recompute modes; dp 2 pp 2: 7 schedules x 3; dp 2 tp 2: 3) are 27
  // calls for 57 layouts (6 + 14 x 3 + 9).
  const int refused_calls = calls - result.simulated;
  CHECK(refused_calls == 27);
  CHECK(result.refused.at("zero 1 is not supported yet") == 57);
}

TEST_CASE("mgpu plan: bad input is one line and exit 2", "[plan][cli]") {
  auto refused = [](std::vector<std::string> args, const std::string& says) {
    args.insert(args.begin(), "plan");
    const auto r = run_mgpu(args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(says));
  };
  refused({"--model", "gpt5", "--gpus", "8"}, "unknown --model 'gpt5'");
  refused({"--model", "gpt2-small", "--gpus", "0"}, "--gpus");
  refused({"--model", "gpt2-small", "--gpus", "-3"}, "--gpus");
  refused({"--model", "gpt2-small", "--gpus", "8", "--profile", "DGX-B300"},
          "unknown profile 'DGX-B300'");
  refused({"--model", "gpt2-small", "--gpus", "8", "--tp", "5"}, "--tp 1, 2, 4");
  refused({"--model", "gpt2-small", "--gpus", "8", "--dp", "16"}, "--dp");
  refused({"--model", "gpt2-small", "--gpus", "8", "--schedule", "zb-h2"}, "--schedule");
  refused({"--gpus", "8"}, "--model is required");
  refused({"--model", "gpt2-small", "--gpus", "1021"}, "use --global-batch 1021");
  refused({"--model", "gpt2-small", "--gpus", "8", "--global-batch", "16777216"},
          "use --global-batch 131072 or less");
  refused({"--model", "gpt2-small", "--gpus", "8", "--global-batch", "0"}, "--global-batch");
  // Every layout the pins allow is one the engine cannot run yet: its reason, not an empty table.
  // (Context parallelism in the hybrid engine is the planner's next axis; when it runs cp this
  // case becomes a table.)
  const auto cp = run_mgpu({"plan", "--model", "gpt2-small", "--gpus", "8", "--cp", "2"});
  if (cp.code != 0) {
    CHECK(cp.code == 2);
    CHECK(count_lines(cp.err) == 1);
    CHECK_THAT(cp.err, Catch::Contains("the engine refuses every layout these pins allow"));
  }
}

TEST_CASE("mgpu plan --json: the ranked layouts with their simulated figures", "[plan][cli]") {
  const auto r =
      run_mgpu({"plan", "--model", "gpt2-small", "--gpus", "8", "--json", "--max-simulated", "4"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is the JSON alone
  CHECK(j.at("gpus") == 8);
  CHECK(j.at("profile") == "DGX-H100");
  CHECK(j.at("global_batch") == 512);  // gpt2's default
  CHECK(j.at("simulated").get<int>() >= 4);
  const nlohmann::json& layouts = j.at("layouts");
  REQUIRE(layouts.size() >= 2);
  double previous = 1e300;
  for (const nlohmann::json& l : layouts) {
    for (const char* key : {"dp", "tp", "pp", "cp", "microbatch_size", "schedule", "zero",
                            "tokens_per_s", "tflops_per_gpu", "mfu", "memory_bytes"})
      CHECK(l.contains(key));
    CHECK(l.at("dp").get<int>() * l.at("tp").get<int>() * l.at("pp").get<int>() *
              l.at("cp").get<int>() ==
          8);
    const double tokens = l.at("tokens_per_s").get<double>();
    CHECK(tokens > 0);
    CHECK(tokens <= previous);  // ranked by tokens/s
    previous = tokens;
    const nlohmann::json& memory = l.at("memory_bytes");
    int64_t sum = 0;
    for (const char* category : {"parameters", "gradients", "optimizer_state", "activations"}) {
      REQUIRE(memory.contains(category));
      sum += memory.at(category).get<int64_t>();
    }
    CHECK(memory.at("total").get<int64_t>() >= sum / 2);  // peaks by category need not coincide
    CHECK(memory.at("total").get<int64_t>() <= int64_t{80} << 30);  // it fits
  }
  // Progress went to stderr, one line per simulation.
  CHECK_THAT(r.err, Catch::Contains("simulated [ 1 of <= "));
}

TEST_CASE("mgpu plan --zero 3 --sp off --vocab-head off: honoured, and named as pinned",
          "[plan][cli]") {
  const auto r = run_mgpu({"plan", "--model", "gpt2-small", "--gpus", "8", "--json",
                           "--max-simulated", "2", "--tp", "2", "--zero", "3", "--sp", "off",
                           "--vocab-head", "off", "--virtual-stages", "1"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j.at("pinned") == nlohmann::json{{"tp", "2"},
                                         {"zero", "3"},
                                         {"sp", "off"},
                                         {"vocab-head", "off"},
                                         {"virtual-stages", "1"}});
  CHECK(j.at("defaults") == nlohmann::json{{"precision", "bf16"}});
  CHECK(j.at("searched") ==
        nlohmann::json{"dp", "pp", "cp", "ep", "microbatch-size", "schedule", "recompute"});
  REQUIRE(!j.at("layouts").empty());
  for (const nlohmann::json& l : j.at("layouts")) {
    CHECK(l.at("zero") == 3);
    CHECK(l.at("tp") == 2);
    CHECK(l.at("virtual_stages") == 1);
    CHECK(l.at("sp") == false);
    CHECK(l.at("vocab_parallel_head") == false);
  }
  const auto text = run_mgpu({"plan", "--model", "gpt2-small", "--gpus", "8", "--max-simulated",
                              "1", "--tp", "2", "--sp", "off"});
  CHECK_THAT(text.out, Catch::Contains("pinned:  --tp 2, --sp off\n") &&
                           Catch::Contains("searched: --dp, --pp, --cp") &&
                           Catch::Contains("--virtual-stages") &&
                           Catch::Contains("default: --precision bf16\n"));
  const auto bad = run_mgpu({"plan", "--model", "gpt2-small", "--gpus", "8", "--sp", "maybe"});
  CHECK(bad.code == 2);
  CHECK(count_lines(bad.err) == 1);
}

TEST_CASE("mgpu plan prints the table and the reasons and the counts", "[plan][cli]") {
  const auto r = run_mgpu({"plan", "--model", "gpt2-medium", "--gpus", "16", "--profile",
                           "DGX-A100", "--max-simulated", "4", "--pp", "2"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("16 GPUs = 2 nodes of DGX-A100"));
  CHECK_THAT(r.out, Catch::Contains("tokens/s") && Catch::Contains("MFU") &&
                        Catch::Contains("exposed comm"));
  CHECK_THAT(r.out, Catch::Contains("the bf16 peak 312.0 TFLOP/s"));
  CHECK_THAT(r.out, Catch::Contains("searched ") && Catch::Contains(" simulated, in "));
}

TEST_CASE("recommendations narrates the rules from the planner's numbers", "[plan][lesson]") {
  const auto r = run_mgpu({"run", "recommendations", "--max-simulated", "4"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // Four searches, each with its table and a rule line.
  CHECK_THAT(r.out, Catch::Contains("mgpu plan --model gpt2-small --gpus 8") &&
                        Catch::Contains("mgpu plan --model gpt3-175b --gpus 1024"));
  // On the calibrated clock (materialised attention pays its passes over the T x T scores),
  // gpt2-small's #1 is dp 4 x cp 2: ring attention skips the causally masked blocks that plain
  // attention computes, which now outweighs cp's K/V traffic; the lesson says so in its rule.
  CHECK_THAT(r.out, Catch::Contains("one would expect pure data parallelism, but") &&
                        Catch::Contains("#1 here is dp 4 tp 1 pp 1 cp 2"));
  // 175B: bf16 weights + fp32 gradients + fp32 masters and AdamW moments, the lessons' 18 B.
  CHECK_THAT(r.out, Catch::Contains("AdamW with bf16 weights holds 18 B per parameter: 3.14 TB"));
  // The tensor-parallel sentence follows #1's tp: no group to place when tp is 1.
  const size_t cut = r.out.find("ways: tp ");
  REQUIRE(cut != std::string::npos);
  const bool tp1 = r.out.compare(cut, 11, "ways: tp 1 ") == 0;
  const std::string rule = r.out.substr(cut, r.out.find('\n', cut) - cut);
  CHECK(rule.find(tp1 ? "It needs no tensor-parallel group (tp 1"
                      : "Its tensor-parallel group stays inside a node") != std::string::npos);
  CHECK_THAT(r.out, Catch::Contains("== 3. long sequences ==") &&
                        Catch::Contains("== 4. optimizer state over the capacity =="));
  // The engine runs cp and ZeRO-1: both rules come with simulated numbers, not a refusal.
  CHECK_THAT(r.out, Catch::Contains("the best context-parallel layout (dp "));
  CHECK_THAT(r.out, Catch::Contains("ZeRO-1 shards it over dp: dp 16"));
  CHECK_THAT(r.out, !Catch::Contains("refuses it today"));
  // An option this lesson cannot honour is refused, not ignored.
  const auto traced = run_mgpu({"run", "recommendations", "--trace", "x.json"});
  CHECK(traced.code == 2);
  CHECK_THAT(traced.err, Catch::Contains("--trace"));
  CHECK(count_lines(traced.err) == 1);
}

TEST_CASE("plan counts a refusal raised on a stage thread as the engine's refusal", "[plan]") {
  SearchRequest r;
  r.workload.model = small_model();
  r.workload.seams = reference::seams().hybrid();
  r.gpus = 4;
  r.global_batch = 8;
  r.profile = HardwareProfile::load("DGX-H100");
  r.pins = fp32_only();
  r.max_simulated = 250;
  auto fake = [](const Workload&, const Layout& l, const HardwareProfile&) {
    if (l.cp > 1)
      throw RankError(0, "cp refused",
                      std::make_exception_ptr(std::invalid_argument("cp refused")));
    Prediction p;
    p.tokens_per_s = 1;
    return p;
  };
  const SearchResult result = search(r, {}, fake);
  REQUIRE(result.refused.count("cp refused") == 1);
  CHECK(result.refused.at("cp refused") == result.enumerated - 228);  // every cp > 1 layout
  for (const Simulated& s : result.ranked) CHECK(s.layout.cp == 1);
  // Any other failure on a stage thread is a failure, not a refusal.
  auto broken = [](const Workload&, const Layout&, const HardwareProfile&) -> Prediction {
    throw RankError(1, "out of disk");
  };
  CHECK_THROWS_AS(search(r, {}, broken), RankError);
}

namespace {
// GPT-2 medium's width on 8 layers: the screen's figures are large enough to order.
GPTConfig screened_model() {
  GPTConfig m;
  m.layers = 8;
  m.heads = 16;
  m.dim = 1024;
  m.seq_len = 1024;
  m.vocab = 50257;
  return m;
}
}  // namespace

TEST_CASE("plan's screen orders memory the way the formulas say", "[plan]") {
  const GPTConfig m = screened_model();
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  const Layout base{.dp = 2, .tp = 2, .pp = 2, .microbatch_size = 2, .microbatches = 8};
  auto memory = [&](Layout l) { return screen_layout(m, l, h100).memory_bytes; };
  Layout selective = base, full = base, zero = base, gpipe = base, no_tp = base;
  selective.recompute = "selective";
  full.recompute = "full";
  zero.zero = 1;
  gpipe.schedule = "gpipe";
  no_tp.tp = 1;
  no_tp.dp = 4;
  CHECK(memory(full) < memory(selective));
  CHECK(memory(selective) < memory(base));
  CHECK(memory(zero) < memory(base));   // AdamW state over dp
  CHECK(memory(gpipe) > memory(base));  // M micro-batches in flight instead of pp
  CHECK(memory(no_tp) > memory(base));  // the block's weights and most activations whole
  // Time: recompute costs a forward; a second stage adds (pp - 1) micro-batch slots of bubble.
  auto time = [&](Layout l) { return screen_layout(m, l, h100).step_seconds; };
  CHECK(time(full) > time(base));
  Layout one_stage = base;
  one_stage.pp = 1;
  one_stage.dp = 4;
  one_stage.microbatches = 4;
  CHECK(time(one_stage) < time(base));
}

namespace {
GPTConfig small_moe_model() {
  GPTConfig m = small_model();
  m.experts = 4;
  m.top_k = 2;
  return m;
}
}  // namespace

TEST_CASE("plan searches ep for a model with experts: each divisor of dp that divides them",
          "[plan][moe]") {
  Pins pins = fp32_only();
  pins.cp = 1;
  const std::vector<Layout> dense = enumerate_layouts(small_model(), 8, 16, pins);
  for (const Layout& l : dense) CHECK(l.ep == 1);
  // With 4 experts, every dense layout comes once per ep in {1, 2, 4} that divides its dp (dp 8:
  // ep 1, 2, 4 - not 8, which does not divide the experts).
  std::map<int, std::set<int>> ep_by_dp;
  for (const Layout& l : enumerate_layouts(small_moe_model(), 8, 16, pins)) {
    CHECK(l.dp % l.ep == 0);
    CHECK(4 % l.ep == 0);
    ep_by_dp[l.dp].insert(l.ep);
  }
  CHECK(ep_by_dp[1] == std::set<int>{1});
  CHECK(ep_by_dp[2] == std::set<int>{1, 2});
  CHECK(ep_by_dp[4] == std::set<int>{1, 2, 4});
  CHECK(ep_by_dp[8] == std::set<int>{1, 2, 4});
  size_t expected = 0;  // (without the split-backward schedules an MoE block cannot run)
  for (const Layout& l : dense)
    if (!parallel::splits_backward(l.schedule)) expected += ep_by_dp[l.dp].size();
  CHECK(enumerate_layouts(small_moe_model(), 8, 16, pins).size() == expected);
  // A pinned ep: only it, and only where it divides dp.
  pins.ep = 4;
  for (const Layout& l : enumerate_layouts(small_moe_model(), 8, 16, pins)) {
    CHECK(l.ep == 4);
    CHECK(l.dp % 4 == 0);
  }
  CHECK_THAT(describe(enumerate_layouts(small_moe_model(), 8, 16, pins).front()),
             Catch::Contains(" ep 4 "));
  // ep 8 divides dp 8 but not the 4 experts; on a dense model ep has nothing to split.
  pins.ep = 8;
  CHECK_THROWS_WITH(enumerate_layouts(small_moe_model(), 8, 16, pins),
                    Catch::Contains("--ep 8") && Catch::Contains("--ep 1, 2, 4 would work"));
  pins.ep = 2;
  CHECK_THROWS_WITH(enumerate_layouts(small_model(), 8, 16, pins),
                    Catch::Contains("--ep 2") && Catch::Contains("dense"));
}

TEST_CASE("plan's screen holds the experts at 1/ep and pays the all-to-alls", "[plan][moe]") {
  GPTConfig m = screened_model();
  m.experts = 8;
  m.top_k = 2;
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  const Layout base{.dp = 8, .microbatch_size = 1, .microbatches = 4};
  auto screen = [&](int ep) {
    Layout l = base;
    l.ep = ep;
    return screen_layout(m, l, h100);
  };
  // The experts' states shrink with ep: 8 MoE blocks x 8 experts x (2 C 4C + 5C) parameters, of
  // which each rank keeps 1/ep; AdamW bf16 keeps 2 + 4 + 12 bytes per parameter (dp's flat fp32
  // gradient buffer holds the dense gradients only: experts sync over dp / ep).
  const double expert_params = 8.0 * 8 * (8.0 * 1024 * 1024 + 5 * 1024);
  const double per_param = 2 + 4 + 12;
  CHECK(screen(1).memory_bytes - screen(2).memory_bytes ==
        Approx(expert_params / 2 * per_param).epsilon(1e-6));
  CHECK(screen(2).memory_bytes - screen(8).memory_bytes ==
        Approx(expert_params * 3 / 8 * per_param).epsilon(1e-6));
  // ep 1 exchanges nothing; ep > 1 pays 4 all-to-alls per block and micro-batch, but averages
  // fewer expert gradients over dp / ep ranks: the screen's time moves.
  CHECK(screen(2).step_seconds != screen(1).step_seconds);
  // A dense model's screen is the one it always was (no MoE term).
  GPTConfig dense = m;
  dense.experts = 0;
  Layout l = base;
  CHECK(screen_layout(dense, l, h100).memory_bytes < screen(1).memory_bytes);
}

TEST_CASE("plan leaves out the split-backward schedules for a model with experts", "[plan][moe]") {
  Pins pins = fp32_only();
  pins.cp = 1;
  std::set<std::string> schedules;
  for (const Layout& l : enumerate_layouts(small_moe_model(), 8, 16, pins))
    schedules.insert(l.schedule);
  CHECK(schedules == std::set<std::string>{"gpipe", "1f1b", "interleaved"});
  pins.schedule = "zbv";
  CHECK_THROWS_WITH(enumerate_layouts(small_moe_model(), 8, 16, pins),
                    Catch::Contains("--schedule zbv splits the backward") &&
                        Catch::Contains("use --schedule 1f1b"));
}

TEST_CASE("mgpu plan --model FILE.json with experts searches and shows ep", "[plan][cli][moe]") {
  const std::string path = mgpu::testing::temp_path("moe_model.json");
  {
    std::ofstream file(path);
    file << R"({"layers": 4, "dim": 64, "heads": 4, "seq": 64, "vocab": 256, "experts": 4,
                "top_k": 2})";
  }
  const auto r = run_mgpu({"plan", "--model", path, "--gpus", "8", "--max-simulated", "3",
                           "--global-batch", "16", "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(!j["layouts"].empty());
  std::set<int> eps;
  for (const auto& l : j["layouts"]) {
    CHECK(l["dp"].get<int>() % l["ep"].get<int>() == 0);
    CHECK(l["cp"] == 1);  // experts do not run under cp: refused, never ranked
    eps.insert(l["ep"].get<int>());
  }
  CHECK(*eps.rbegin() > 1);  // the screen puts an expert-parallel layout among the simulated
  const auto text = run_mgpu(
      {"plan", "--model", path, "--gpus", "8", "--max-simulated", "3", "--global-batch", "16"});
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out,
             Catch::Contains(" cp  ep  mbs ") && Catch::Contains("experts per MoE block"));
  std::remove(path.c_str());
}

}  // namespace test_plan_search

// Expert parallelism: on 1, 2 and 4 ranks and on ep 2 x dp 4 it trains to the single-device MoE
// parameters (SGD and AdamW), compared through --checkpoint, and resumes across layouts; one MoE
// exchange moves exactly the rows a fixed routing asks for (counts, bytes and labels in the
// trace equal the formulas); the lesson's report agrees with itself and bad sizes are one line.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "common/checkpoints.h"
#include "common/selected_seams.h"
#include "core/parallel/expert_parallel.h"
#include "core/theory/collectives.h"
#include "core/theory/expert_parallel.h"
#include "core/trace/chrome_trace.h"
#include "core/world/world.h"
#include "lessons/expert_parallel.h"
#include "unit/mgpu_cli.h"

namespace test_expert_parallel {

using namespace mgpu;
using mgpu::testing::count_lines;
using mgpu::testing::load_checkpoint_by_name;
using mgpu::testing::max_difference;
using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {

// A tiny MoE model (4 experts, top-2, every block MoE) every layout here can split.
std::vector<std::string> moe_run(const std::string& lesson, int ranks, int ep, int steps,
                                 const std::string& optimizer, const std::string& lr = "3e-3") {
  std::vector<std::string> a = {"run",      lesson, "--steps",     std::to_string(steps),
                                "--layers", "2",    "--dim",       "16",
                                "--heads",  "2",    "--seq",       "8",
                                "--batch",  "8",    "--experts",   "4",
                                "--top-k",  "2",    "--optimizer", optimizer,
                                "--lr",     lr,     "-q"};
  if (lesson != "single_device") a.insert(a.end(), {"--ranks", std::to_string(ranks)});
  if (lesson == "expert_parallel") a.insert(a.end(), {"--ep", std::to_string(ep)});
  return a;
}

std::string checkpoint(std::vector<std::string> args, const std::string& name,
                       const std::string& resume = "") {
  const std::string path = temp_path(name + ".ckpt");
  args.insert(args.end(), {"--checkpoint", path});
  if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
  if (args[1] == "expert_parallel") args.insert(args.end(), {"--skew", "1"});  // one act
  auto r = run_mgpu(args);
  INFO(name << ": " << r.err << r.out);
  REQUIRE(r.code == 0);
  return path;
}

// Same global-batch gradients summed in another order (shards, expert rows gathered from other
// ranks): fp32 rounding, amplified by AdamW's 1/sqrt(v) in tiny gradients (as for DDP and TP).
constexpr float kTolerance = 2e-5f;

}  // namespace

// SGD at lr 1: a parameter moves by its whole gradient, so a wrong gradient (a missing 1/dp on
// the experts, an expert's rows from the wrong tokens) is a difference of its own size, while
// the exchange's reordering of sums stays at fp32 rounding (measured: 1.8e-7 on 4 ranks).
TEST_CASE("expert parallelism computes the single-device MoE gradients (SGD)",
          "[ep][equivalence]") {
  const auto reference = load_checkpoint_by_name(
      checkpoint(moe_run("single_device", 1, 1, 3, "sgd", "1"), "ep_single_sgd"));
  for (auto [ranks, ep] : {std::pair{1, 1}, {2, 2}, {4, 4}, {4, 2}}) {
    INFO("ranks " << ranks << ", ep " << ep);
    const auto mine =
        load_checkpoint_by_name(checkpoint(moe_run("expert_parallel", ranks, ep, 3, "sgd", "1"),
                                           fmt::format("ep_{}_{}_sgd", ranks, ep)));
    CHECK(max_difference(mine, reference, "param") <= 1e-6f);
    CHECK(max_difference(mine, reference, "optimizer_state") <= 1e-6f);
  }
}

// AdamW divides each update by sqrt(v): where an expert's gradient is tiny, fp32 rounding of its
// sum in another order moves the update by up to ~lr/1000. DDP on the same MoE model (the plain
// data-parallel layout, no experts split) shows the same: the check is that expert parallelism
// lands as close to the single device as DDP does.
TEST_CASE("expert parallelism trains to the single-device MoE parameters (AdamW)",
          "[ep][equivalence]") {
  const auto reference = load_checkpoint_by_name(
      checkpoint(moe_run("single_device", 1, 1, 3, "adamw"), "ep_single_adamw"));
  for (auto [ranks, ep] : {std::pair{1, 1}, {2, 2}, {4, 4}, {4, 2}}) {
    INFO("ranks " << ranks << ", ep " << ep);
    float ddp = 0;
    if (ranks > 1)
      ddp = max_difference(load_checkpoint_by_name(checkpoint(moe_run("ddp", ranks, 1, 3, "adamw"),
                                                              fmt::format("ddp_{}", ranks))),
                           reference, "param");
    const float tolerance = std::max(kTolerance, 1.5f * ddp);
    INFO("DDP's difference " << ddp);
    const auto mine =
        load_checkpoint_by_name(checkpoint(moe_run("expert_parallel", ranks, ep, 3, "adamw"),
                                           fmt::format("ep_{}_{}_adamw", ranks, ep)));
    CHECK(max_difference(mine, reference, "param") <= tolerance);
    CHECK(max_difference(mine, reference, "optimizer_state") <= tolerance);
  }
}

TEST_CASE("expert parallelism with a capacity factor drops what one device drops",
          "[ep][equivalence]") {
  auto with_capacity = [](std::vector<std::string> a) {
    a.insert(a.end(), {"--capacity-factor", "1"});
    return a;
  };
  const auto reference = load_checkpoint_by_name(
      checkpoint(with_capacity(moe_run("single_device", 1, 1, 3, "sgd", "1")), "ep_cap_single"));
  const auto mine = load_checkpoint_by_name(
      checkpoint(with_capacity(moe_run("expert_parallel", 4, 2, 3, "sgd", "1")), "ep_cap_4_2"));
  CHECK(max_difference(mine, reference, "param") <= 1e-6f);
}

// (SGD with momentum at lr 1, as above: the resumed state must be exact, not AdamW-close.)
TEST_CASE("an expert-parallel checkpoint resumes on another layout", "[ep][resume]") {
  const auto straight = load_checkpoint_by_name(
      checkpoint(moe_run("single_device", 1, 1, 4, "sgd", "1"), "ep_resume_straight"));
  const std::string half =
      checkpoint(moe_run("expert_parallel", 2, 2, 2, "sgd", "1"), "ep_resume_half_ep2");
  for (auto [ranks, ep] : {std::pair{4, 4}, {1, 1}}) {
    INFO("resumed on ranks " << ranks << ", ep " << ep);
    const std::string lesson = ranks == 1 ? "single_device" : "expert_parallel";
    const auto resumed = load_checkpoint_by_name(checkpoint(
        moe_run(lesson, ranks, ep, 4, "sgd", "1"), fmt::format("ep_resumed_{}", ranks), half));
    CHECK(max_difference(resumed, straight, "param") <= 1e-6f);
    CHECK(max_difference(resumed, straight, "optimizer_state") <= 1e-6f);
  }
}

// ---- one exchange, by hand ----

namespace {

constexpr int64_t kWidth = 3;  // elements per row

// Rank r's kept slots per expert: uneven, with zeros (rank 1 keeps nothing for expert 0).
std::vector<int64_t> counts_of(int rank, int experts) {
  std::vector<int64_t> counts(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) counts[static_cast<size_t>(e)] = (rank * 3 + e * 2) % 5;
  return counts;
}

// The value of element k of the row-th row rank `rank` sends to expert `expert`.
float tag(int rank, int expert, int64_t row, int64_t k) {
  return static_cast<float>(rank * 10000 + expert * 100 + row * kWidth + k);
}

}  // namespace

TEST_CASE("one MoE exchange moves the rows a fixed routing asks for, and the trace says so",
          "[ep][exchange]") {
  for (int ranks : {2, 4}) {
    const int experts = 2 * ranks, local = 2;
    INFO(ranks << " ranks, " << experts << " experts");
    std::mutex mutex;
    std::vector<std::string> problems;
    World world(WorldOptions{.ranks = ranks, .all_reduce = selected_all_reduce()});
    world.run([&](RankContext& ctx) {
      const int me = ctx.rank;
      parallel::ExpertParallelComm comm(*ctx.comm);
      const ExchangeSite site{.layer = 3};  // block 3's forward, as the block would say
      Routing routing;
      routing.tokens_per_expert = counts_of(me, experts);
      const int64_t sent = std::accumulate(routing.tokens_per_expert.begin(),
                                           routing.tokens_per_expert.end(), int64_t{0});
      const ExchangePlan plan = comm.plan(routing, experts, site);
      // Rows in dispatch order: by expert, each tagged with (me, expert, index).
      Tensor rows = Tensor::empty({sent, kWidth}, MemCategory::activations);
      int64_t at = 0;
      for (int e = 0; e < experts; ++e)
        for (int64_t i = 0; i < routing.tokens_per_expert[e]; ++i, ++at)
          for (int64_t k = 0; k < kWidth; ++k) rows.f32()[at * kWidth + k] = tag(me, e, i, k);
      Tensor expert_rows = Tensor::empty({plan.received_rows(), kWidth}, MemCategory::activations);
      comm.to_experts(rows, expert_rows, plan, site);
      // Expected: for each of my local experts, each source's rows in order.
      std::vector<float> want;
      for (int e = me * local; e < (me + 1) * local; ++e)
        for (int s = 0; s < ranks; ++s)
          for (int64_t i = 0; i < counts_of(s, experts)[e]; ++i)
            for (int64_t k = 0; k < kWidth; ++k) want.push_back(tag(s, e, i, k));
      Tensor back = Tensor::empty({sent, kWidth}, MemCategory::activations);
      comm.to_tokens(expert_rows, back, plan, site);
      std::lock_guard lock(mutex);
      if (expert_rows.to_vector() != want)
        problems.push_back(fmt::format("rank {}: to_experts", me));
      if (back.to_vector() != rows.to_vector())
        problems.push_back(fmt::format("rank {}: to_tokens is not the inverse", me));
    });
    CHECK(problems == std::vector<std::string>{});
    // The trace: each rank's labelled events, bytes by the formula.
    const trace::Trace trace = world.collect_trace({});
    std::vector<std::vector<int64_t>> all;
    for (int r = 0; r < ranks; ++r) all.push_back(counts_of(r, experts));
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      std::map<std::string, int64_t> sent;
      std::vector<int64_t> counts;
      for (const trace::Event& e : trace.events) {
        if (e.rank != r || e.lane != trace::Lane::comm) continue;
        if (e.name == "dispatch counts") counts = e.counts;
        if (e.op == "all_to_all_v") sent[e.name] += e.sent_bytes;
        CHECK(e.layer == 3);  // the site's block
      }
      CHECK(counts == all[r]);
      CHECK(sent["dispatch"] ==
            theory::moe_dispatch_sent_bytes(theory::rows_per_rank(all[r], ranks), r, kWidth,
                                            sizeof(float)));
      CHECK(sent["combine"] == theory::combine_rows_sent(all, r) * kWidth * int64_t{sizeof(float)});
      CHECK(sent.size() == 2);
    }
  }
}

TEST_CASE("the expert_parallel lesson's report matches its formulas and labels its all-to-alls",
          "[ep][lesson]") {
  const std::string trace_path = temp_path("ep_lesson.json");
  auto args = moe_run("expert_parallel", 4, 2, 2, "adamw");
  args.erase(std::find(args.begin(), args.end(), "-q"));  // the report is the point
  args.insert(args.end(), {"--capacity-factor", "1", "--trace", trace_path, "--skew", "8"});
  auto r = run_mgpu(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("differs!") == std::string::npos);
  CHECK(r.out.find("block 1:") != std::string::npos);               // a line per MoE block
  CHECK(r.out.find("> dispatch to experts") != std::string::npos);  // the timeline's legend
  CHECK(r.out.find("< combine from experts") != std::string::npos);
  CHECK(r.out.find("act 2: a skewed router") != std::string::npos);
  std::filesystem::remove(trace_path);
}

TEST_CASE("expert_parallel refuses bad sizes with one line", "[ep][cli]") {
  auto base = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {
        "run", "expert_parallel", "--steps", "1",       "--dim", "16", "--heads",
        "2",   "--seq",           "8",       "--batch", "8",     "-q"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ranks", "4", "--experts", "6"}, "ep=4"},                 // E % ep != 0
      {{"--ranks", "4", "--experts", "4", "--ep", "3"}, "--ep 3"},  // ep does not divide ranks
      {{"--experts", "4", "--top-k", "5"}, "top"},                  // top-k > E
      {{"--experts", "4", "--capacity-factor", "0"}, "capacity"},
      {{"--experts", "4", "--capacity-factor", "-1"}, "capacity"},
      {{"--ranks", "4"}, "--experts"},  // no experts at all
  };
  for (const auto& [extra, says] : cases) {
    auto r = run_mgpu(base(extra));
    INFO(fmt::format("{}", fmt::join(extra, " ")) << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
  }
}

// Under a pipeline the blocks of many micro-batches run in the schedule's order, so an exchange
// cannot count layers: each is labelled with the MoE block that ran it (the block says so). Every
// rank's exchanges name only its own stage's MoE blocks, each block's as often as the schedule
// runs it: per step and micro-batch, its counts, dispatch and combine forward, and combine bwd
// and dispatch bwd (a full recompute runs the forward three again inside the backward).
TEST_CASE("hybrid with ep and a pipeline labels each exchange with its own block",
          "[ep][hybrid][trace]") {
  for (const char* recompute : {"none", "full"}) {
    for (const char* moe_every : {"1", "2"}) {
      INFO("--recompute " << recompute << " --moe-every " << moe_every);
      const std::string path = temp_path("ep_pipeline.json");
      const int steps = 2, microbatches = 2, layers = 4, stages = 2;
      auto r = run_mgpu({"run",         "hybrid",   "--ranks",
                         "8",           "--dp",     "4",
                         "--tp",        "1",        "--pp",
                         "2",           "--ep",     "2",
                         "--experts",   "4",        "--moe-every",
                         moe_every,     "--layers", "4",
                         "--dim",       "16",       "--heads",
                         "2",           "--seq",    "8",
                         "--batch",     "16",       "--microbatches",
                         "2",           "--steps",  "2",
                         "--recompute", recompute,  "-q",
                         "--trace",     path});
      INFO(r.err);
      REQUIRE(r.code == 0);
      const trace::Trace t = trace::read_chrome_trace(path);
      std::filesystem::remove(path);
      const int every = std::stoi(moe_every);
      for (int rank = 0; rank < 8; ++rank) {
        INFO("rank " << rank);
        const int stage = rank / 4;                       // the mesh is tp x dp x pp, pp slowest
        std::map<std::pair<int, std::string>, int> seen;  // (layer, exchange) -> times
        for (const trace::Event& e : t.events)
          if (e.rank == rank && e.lane == trace::Lane::comm && e.layer >= 0 &&
              (e.op == "all_to_all" || e.op == "all_to_all_v"))
            ++seen[{e.layer, e.name}];
        std::map<std::pair<int, std::string>, int> want;
        const int per_stage = layers / stages, times = steps * microbatches;
        const int forwards = std::string(recompute) == "full" ? 2 : 1;
        for (int block = stage * per_stage; block < (stage + 1) * per_stage; ++block) {
          if (block % every != every - 1) continue;  // a dense block exchanges nothing
          for (const char* name : {"dispatch counts", "dispatch", "combine"})
            want[{block, name}] = forwards * times;
          for (const char* name : {"combine bwd", "dispatch bwd"}) want[{block, name}] = times;
        }
        CHECK(seen == want);
      }
    }
  }
}

}  // namespace test_expert_parallel

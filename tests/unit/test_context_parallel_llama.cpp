// Context parallelism on Llama's block (issue #48): grouped-query attention and rotary positions.
//  - ring attention (contiguous, zigzag) and Ulysses (cp dividing the kv heads, and KV < cp with
//    the kv heads copied) train llama-tiny to the single-device parameters at cp 2 and 4;
//  - RoPE must turn each token by its GLOBAL position: with every rank's chunk rotated as if it
//    started at 0 the run is another model; with the chunk's positions it is the single device's;
//  - only the kv heads travel the ring: every K|V hop is B*(T/cp)*2*KV*D, KV/H of multi-head
//    attention's, measured from the trace beside the theory's block and the lesson's line.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "common/llama_config.h"
#include "common/selected_seams.h"
#include "core/data/task.h"
#include "core/optim/optimizer.h"
#include "core/parallel/context_parallel.h"
#include "core/runtime/allocator.h"
#include "core/theory/mesh_traffic.h"
#include "core/trace/chrome_trace.h"
#include "core/world/world.h"
#include "exercises/exercises.h"
#include "unit/cp_runs.h"
#include "unit/test_model_gradcheck.h"

namespace test_context_parallel_llama {

using namespace mgpu;
using namespace mgpu::parallel;
using mgpu::testing::cp_run;
using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {
// llama-tiny (4 query heads sharing 2 kv heads, head size 16, RMSNorm, SwiGLU, RoPE) on sequences
// every layout splits at cp 2 and 4 (16 = 2*4*2). Trained with SGD, whose parity bound is 2e-5:
// AdamW divides by sqrt(v) + eps, so where a gradient nearly cancels it turns the ring's other
// order of sums into up to 3e-5 here under OpenBLAS's Haswell kernels (test_tensor_parallel's
// kAdamWParity says why); SGD passes the same differences on at lr's scale.
std::vector<std::string> llama_tiny(int steps) {
  return {"--model", "llama-tiny", "--seq",       "16",  "--steps", std::to_string(steps),
          "--batch", "4",          "--optimizer", "sgd", "--lr",    "0.05",
          "-q"};
}

constexpr int kSeq = 16;

// rank 0's parameters after two SGD steps of a llama-shaped model on `cp` rank threads (cp 1:
// the single device). `local_positions`: every rank's rotary positions replaced by 0..T/cp-1,
// as if its chunk began the sequence (the attention mask keeps the global positions).
std::vector<std::vector<float>> trained(CpLayout layout, int cp, bool local_positions) {
  auto task = data::make_task("markov", 1, {.seq_len = kSeq});
  GPTConfig cfg = mgpu::testing::small_llama_config();
  cfg.vocab = task->vocab_size();
  cfg.seq_len = kSeq;
  std::vector<std::vector<float>> params;
  World world(WorldOptions{.ranks = cp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto on_rank = context_parallel(
        cfg, *ctx.comm, layout, kSeq,
        [](const ParamList& p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{}); },
        reference::seams().cp);
    // weights far from their small initial values: attention that is not near uniform turns
    // with the positions (the same noise on every rank, each of which holds every weight)
    const ParamList params_on_rank = on_rank->model().params();
    for (size_t i = 0; i < params_on_rank.size(); ++i)
      model_gradcheck::perturb(*params_on_rank[i], 300 + i);
    if (local_positions) {
      std::vector<int32_t> local(size_t(kSeq / cp));
      std::iota(local.begin(), local.end(), 0);
      on_rank->model().set_positions(local);
    }
    for (int step = 0; step < 2; ++step) on_rank->step(task->sample(step, 4, kSeq), step);
    if (ctx.rank == 0)
      for (Param* p : on_rank->model().params()) params.push_back(p->data.to_vector());
  });
  return params;
}

float max_difference(const std::vector<std::vector<float>>& a,
                     const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    REQUIRE(a[t].size() == b[t].size());
    for (size_t i = 0; i < a[t].size(); ++i) worst = std::max(worst, std::abs(a[t][i] - b[t][i]));
  }
  return worst;
}

// The bytes of every ring-attention send rank 0 makes (the K|V blocks and dK|dV accumulators).
std::vector<int64_t> ring_sends(const std::vector<std::string>& args) {
  const std::string path = temp_path("cp_llama.json");
  std::vector<std::string> with_trace = args;
  with_trace.insert(with_trace.end(), {"--trace", path});
  const auto r = run_mgpu(with_trace);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  std::vector<int64_t> sends;
  for (const trace::Event& e : trace::read_chrome_trace(path).events)
    if (e.rank == 0 && e.lane == trace::Lane::comm && e.op == "send") sends.push_back(e.sent_bytes);
  std::filesystem::remove(path);
  return sends;
}
}  // namespace

TEST_CASE("llama-tiny trains to the single-device parameters under ring attention and Ulysses",
          "[cp][context_parallel][llama][equivalence]") {
  // Ulysses at cp 4 has fewer kv heads (2) than ranks: each kv head is copied to the two ranks
  // whose query heads read it, and the copies' gradients are summed.
  // fp32: the ring and the copies sum attention in another order than the one-device kernel
  mgpu::testing::check_trains_to_single_device(llama_tiny(4), {"contiguous", "zigzag", "ulysses"},
                                               {2, 4}, 2e-5f);
  // recompute re-runs the ring (or the all-to-alls) and the rotation in the backward
  for (const std::string mode : {"selective", "full"}) {
    INFO("--recompute " << mode);
    std::vector<std::string> args = llama_tiny(4);
    args.insert(args.end(), {"--recompute", mode});
    mgpu::testing::check_trains_to_single_device(args, {"zigzag", "ulysses"}, {4}, 2e-5f);
  }
}

TEST_CASE("rotary positions under context parallelism are the tokens' global positions",
          "[cp][context_parallel][llama][rope]") {
  const auto single = trained(CpLayout::contiguous, 1, false);
  for (CpLayout layout : {CpLayout::contiguous, CpLayout::zigzag, CpLayout::ulysses}) {
    INFO(cp_layout_name(layout));
    const float right = max_difference(trained(layout, 2, false), single);
    // rotated from 0 on every rank: queries meet other ranks' keys at wrong distances
    const float wrong = max_difference(trained(layout, 2, true), single);
    INFO("global positions: " << right << ", local positions: " << wrong);
    CHECK(right < 1e-5f);
    CHECK(wrong > 1e-3f);
  }
}

TEST_CASE("ring attention sends only the kv heads: each hop is KV/H of multi-head's",
          "[cp][context_parallel][llama][wire]") {
  const int cp = 2, b = 4, seq = 16, d = 16;  // llama-tiny: 4 heads of 16, 2 kv heads
  const std::vector<std::string> gqa = cp_run("zigzag", cp, llama_tiny(1));
  std::vector<std::string> mha = gqa;
  mha.insert(mha.end(), {"--kv-heads", "4"});
  const int64_t gqa_hop = theory::cp_kv_block_elements(b, seq / cp, 2, d) * 4;  // fp32
  const int64_t mha_hop = theory::cp_kv_block_elements(b, seq / cp, 4, d) * 4;
  CHECK(gqa_hop * 2 == mha_hop);
  // fp32: the K|V blocks and the dK|dV accumulators are the same size; 2 layers x 4 hops
  for (auto [args, hop] : {std::pair{gqa, gqa_hop}, std::pair{mha, mha_hop}}) {
    const std::vector<int64_t> sends = ring_sends(args);
    CHECK(sends.size() == 2 * (3 * cp - 2));
    CHECK(std::all_of(sends.begin(), sends.end(), [&](int64_t s) { return s == hop; }));
  }
  // the lesson prints the same figure beside multi-head attention's
  std::vector<std::string> printed = gqa;
  printed.erase(std::find(printed.begin(), printed.end(), "-q"));
  const auto r = run_mgpu(printed);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains(fmt::format("x KV x D x 4 B = 2 x {} x {} x 2 x {} x 4 = {} "
                                                "(MHA: 2 x B x T/cp x H x D = {}, H/KV = 2x less)",
                                                b, seq / cp, d, format_bytes(gqa_hop),
                                                format_bytes(mha_hop))));
}

TEST_CASE("ulysses refuses kv heads that do not split over its ranks, in one line",
          "[cp][context_parallel][llama][usage]") {
  // 6 heads over 3 ranks, 2 kv heads: rank 1's query heads 2, 3 read kv heads 0 and 1
  const auto r = run_mgpu(cp_run(
      "ulysses", 3,
      {"--model", "llama-tiny", "--seq", "12", "--dim", "48", "--heads", "6", "--steps", "1"}));
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("2 kv heads over 3 ranks need cp to divide them"));
  CHECK(mgpu::testing::count_lines(r.err) == 1);
}

}  // namespace test_context_parallel_llama

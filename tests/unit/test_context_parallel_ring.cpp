// Ring attention inside the context-parallel layout (core/parallel/context_parallel): every K/V
// block that some query can see is merged into the running result through the exercise-07 seam
// (the one `--impl mine` replaces), fully masked blocks are skipped, and the token positions of
// each layout are the chunks the lesson promises.
#include <catch2/catch.hpp>

#include <atomic>

#include "common/selected_seams.h"
#include "core/data/task.h"
#include "core/parallel/context_parallel.h"
#include "core/world/world.h"
#include "exercises/exercises.h"

namespace test_context_parallel_ring {

using namespace mgpu;
using namespace mgpu::parallel;

namespace {
// Merges one forward step of a 2-layer model on `cp` rank threads, counting the seam's calls.
int merges_in_one_step(CpLayout layout, int cp) {
  const CpSeams& reference = reference::seams().cp;
  std::atomic<int> merges{0};
  const CpSeams counting{
      "counting",
      [&](Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
        ++merges;
        reference.merge(out, lse, block_out, block_lse);
      },
      reference.merge_backward};
  auto task = data::make_task("markov", 1, {.seq_len = 16});
  GPTConfig cfg;
  cfg.vocab = task->vocab_size();
  cfg.seq_len = 16;
  cfg.layers = 2;
  cfg.dim = 16;
  cfg.heads = 2;
  World world(WorldOptions{.ranks = cp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto layout_on_rank = context_parallel(
        cfg, *ctx.comm, layout, 16,
        [](const ParamList& params) {
          return std::make_unique<optim::SGD>(params, optim::SGDOptions{});
        },
        counting);
    layout_on_rank->step(task->sample(0, 2, 16), 0);
  });
  return merges.load();
}
}  // namespace

TEST_CASE("ring attention merges every visible K/V block through the exercise-07 seam",
          "[cp][ring]") {
  // zigzag: every rank sees part of every other rank's block: cp-1 merges per rank and layer
  CHECK(merges_in_one_step(CpLayout::zigzag, 2) == 2 * 1 * 2);
  CHECK(merges_in_one_step(CpLayout::zigzag, 4) == 4 * 3 * 2);
  // contiguous: rank r sees only the r blocks before its own; later blocks are skipped
  CHECK(merges_in_one_step(CpLayout::contiguous, 4) == (0 + 1 + 2 + 3) * 2);
  // chunked and ulysses never merge partial results
  CHECK(merges_in_one_step(CpLayout::chunked, 4) == 0);
  CHECK(merges_in_one_step(CpLayout::ulysses, 2) == 0);
}

TEST_CASE("each layout's token positions are the promised chunks", "[cp][positions]") {
  using P = std::vector<int32_t>;
  CHECK(cp_positions(8, 2, 1, CpLayout::contiguous) == P{4, 5, 6, 7});
  CHECK(cp_positions(16, 4, 0, CpLayout::zigzag) == P{0, 1, 14, 15});
  CHECK(cp_positions(16, 4, 3, CpLayout::zigzag) == P{6, 7, 8, 9});
  CHECK(cp_positions(8, 2, 0, CpLayout::chunked) == P{0, 1, 2, 3});
  CHECK_THROWS_WITH(check_cp_size(GPTConfig{}, 12, 4, CpLayout::zigzag),
                    Catch::Contains("--seq 12 does not split into 8 equal chunks"));
  CHECK_NOTHROW(check_cp_size(GPTConfig{}, 12, 4, CpLayout::contiguous));
}

}  // namespace test_context_parallel_ring

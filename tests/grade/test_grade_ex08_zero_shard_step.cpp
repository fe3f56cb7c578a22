// Graded: exercise 08, ZeRO stage 1's sharded optimizer step
// (docs/exercises/08-zero-sharded-step.md). The installed seam functions run on 1 to 5 rank
// threads, each rank holding whole flat units of uneven sizes and its own gradient; the owned
// chunks, the averaged gradient, the update between the two halves and the re-assembled parameters
// are checked on the main thread, and the collectives each rank issued are read from the trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/comm/comm.h"
#include "core/parallel/zero.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {
const std::vector<int64_t> kUnitSizes = {7, 5, 12};  // 5 ranks: 7 and 12 do not divide

float initial_param(size_t unit, size_t i) {
  return std::sin(0.3f * float(i) + float(unit));
}

float gradient_of(int rank, size_t unit, size_t i) {
  return float(rank + 1) * std::cos(0.7f * float(i) + float(unit));
}

// What one rank saw and ended with; checked on the main thread (Catch is not thread-safe).
struct RankResult {
  std::vector<std::pair<int64_t, int64_t>> owned;   // per unit
  std::vector<std::vector<float>> grads_at_update;  // per unit, when update_owned ran
  std::vector<std::vector<float>> params_after;     // per unit, after the step
  int updates = 0;
};

// One sharded step on `ranks` threads; update_owned applies params -= grads on the owned chunks.
std::vector<RankResult> run_step(int ranks, World& world) {
  std::vector<RankResult> results(static_cast<size_t>(ranks));
  world.run([&](RankContext& ctx) {
    comm::Comm& dp = *ctx.comm;
    RankResult& mine = results[static_cast<size_t>(ctx.rank)];
    std::vector<parallel::FlatUnit> units;
    for (size_t u = 0; u < kUnitSizes.size(); ++u) {
      std::vector<float> p, g;
      for (int64_t i = 0; i < kUnitSizes[u]; ++i) {
        p.push_back(initial_param(u, static_cast<size_t>(i)));
        g.push_back(gradient_of(ctx.rank, u, static_cast<size_t>(i)));
      }
      units.push_back({Tensor::from({kUnitSizes[u]}, p, MemCategory::parameters),
                       Tensor::from({kUnitSizes[u]}, g, MemCategory::gradients)});
      mine.owned.push_back(ex::selected_seams().zero.owned_chunk(kUnitSizes[u], ranks, ctx.rank));
    }
    ex::selected_seams().zero.sharded_step(dp, units, [&] {
      ++mine.updates;
      for (size_t u = 0; u < units.size(); ++u) {
        mine.grads_at_update.push_back(units[u].grads.to_vector());
        auto [begin, end] = mine.owned[u];
        std::vector<float> p = units[u].params.to_vector(), g = units[u].grads.to_vector();
        for (int64_t i = begin; i < end; ++i)
          p[static_cast<size_t>(i)] -= g[static_cast<size_t>(i)];
        units[u]
            .params.flat_range(begin, end)
            .copy_from(Tensor::from({end - begin},
                                    std::vector<float>(p.begin() + begin, p.begin() + end)));
      }
    });
    for (const parallel::FlatUnit& u : units) mine.params_after.push_back(u.params.to_vector());
  });
  return results;
}

float mean_gradient(int ranks, size_t unit, size_t i) {
  float sum = 0;
  for (int r = 0; r < ranks; ++r) sum += gradient_of(r, unit, i);
  return sum / float(ranks);
}

}  // namespace

TEST_CASE("ex08 owned chunks are consecutive and cut like the collectives (2 pts)",
          "[grade][ex08]") {
  for (int64_t numel : {0, 1, 5, 7, 12, 1000})
    for (int ranks = 1; ranks <= 8; ++ranks) {
      INFO(numel << " elements over " << ranks << " ranks");
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        auto [begin, end] = ex::selected_seams().zero.owned_chunk(numel, ranks, r);
        CHECK(begin == next);
        CHECK(end - begin == numel / ranks + (r < numel % ranks ? 1 : 0));
        next = end;
      }
      CHECK(next == numel);
    }
}

TEST_CASE("ex08 each rank updates from the mean gradient of its own chunk (3 pts)",
          "[grade][ex08]") {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    INFO("ranks = " << ranks);
    World world(grade::local_world(ranks));
    const std::vector<RankResult> results = run_step(ranks, world);
    for (int r = 0; r < ranks; ++r) {
      const RankResult& mine = results[static_cast<size_t>(r)];
      REQUIRE(mine.updates == 1);  // update_owned once, for all units
      for (size_t u = 0; u < kUnitSizes.size(); ++u) {
        INFO("rank " << r << ", unit " << u);
        auto [begin, end] = mine.owned[u];
        for (int64_t i = begin; i < end; ++i)
          REQUIRE(mine.grads_at_update[u][static_cast<size_t>(i)] ==
                  Approx(mean_gradient(ranks, u, static_cast<size_t>(i))).margin(1e-6));
      }
    }
  }
}

TEST_CASE("ex08 every rank ends with every rank's updated chunk (3 pts)", "[grade][ex08]") {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    INFO("ranks = " << ranks);
    World world(grade::local_world(ranks));
    const std::vector<RankResult> results = run_step(ranks, world);
    for (int r = 0; r < ranks; ++r)
      for (size_t u = 0; u < kUnitSizes.size(); ++u) {
        INFO("rank " << r << ", unit " << u);
        const std::vector<float>& p = results[static_cast<size_t>(r)].params_after.at(u);
        REQUIRE(p.size() == static_cast<size_t>(kUnitSizes[u]));
        for (size_t i = 0; i < p.size(); ++i)
          REQUIRE(p[i] == Approx(initial_param(u, i) - mean_gradient(ranks, u, i)).margin(1e-6));
      }
  }
}

// Bytes rank 0 sends in its comm-lane events of `world`'s trace, and how many of each kind.
struct Traffic {
  int reduce_scatters = 0, all_gathers = 0, others = 0;
  int64_t sent = 0;
};

Traffic rank0_traffic(const World& world) {
  Traffic t;
  for (const trace::Event& e : world.collect_trace().events) {
    if (e.rank != 0 || e.lane != trace::Lane::comm) continue;
    t.sent += e.sent_bytes;
    if (e.op == "reduce_scatter")
      ++t.reduce_scatters;
    else if (e.op == "all_gather")
      ++t.all_gathers;
    else if (e.op != "send" && e.op != "recv")
      ++t.others;
  }
  return t;
}

TEST_CASE("ex08 one reduce-scatter and one all-gather per unit: 2(N-1)/N of it sent (2 pts)",
          "[grade][ex08]") {
  const int ranks = 4;
  World world(grade::local_world(ranks));
  run_step(ranks, world);
  const Traffic got = rank0_traffic(world);
  // What one reduce-scatter and one all-gather of each unit send (the ring's 2(N-1)/N of it).
  World plain(grade::local_world(ranks));
  plain.run([&](RankContext& ctx) {
    for (int64_t n : kUnitSizes) {
      auto [begin, end] = comm::chunk_range(n, ranks, ctx.rank);
      Tensor whole = Tensor::zeros({n}, MemCategory::gradients);
      Tensor chunk = Tensor::zeros({end - begin}, MemCategory::comm_buffers);
      ctx.comm->reduce_scatter(whole, chunk, comm::ReduceOp::avg);
      ctx.comm->all_gather(chunk, whole);
    }
  });
  const Traffic want = rank0_traffic(plain);
  CHECK(got.reduce_scatters == static_cast<int>(kUnitSizes.size()));
  CHECK(got.all_gathers == static_cast<int>(kUnitSizes.size()));
  CHECK(got.others == 0);  // no all-reduce: that would send each unit twice more
  CHECK(got.sent == want.sent);
}

// all_to_all and the async reduce-scatter / all-gather on the local backend: the right blocks
// reach the right ranks, the bytes on the wire are the rank's own sends, the async forms equal
// the sync ones bit for bit, and wrong sizes or mismatched calls are clear errors, not hangs.
#include <catch2/catch.hpp>

#include <functional>

#include "common/collective_reference.h"
#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/runtime/world.h"

using namespace mgpu;
using Catch::Matchers::Contains;
using comm::ReduceOp;

namespace {

WorldOptions options_for(int ranks) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = 10;
  o.trace = true;
  return o;
}

// What rank `src` puts in element i of the block it sends to rank `dst`: every (src, dst, i)
// gives a different value, so a block delivered to the wrong rank or slot cannot go unnoticed.
float block_value(int src, int dst, int64_t i) {
  return static_cast<float>(src * 1000000 + dst * 1000 + i);
}

std::string run_expecting_failure(World& world, const std::function<void(RankContext&)>& fn) {
  try {
    world.run(fn);
  } catch (const RankError& e) {
    return e.what();
  }
  return "(the run did not fail)";
}

}  // namespace

TEST_CASE("all_to_all: block j of rank r lands in block r of rank j, 1..8 ranks",
          "[comm][local][all_to_all]") {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t block : {0, 1, 5, 130}) {
      INFO("ranks=" << ranks << " block=" << block);
      World world(options_for(ranks));
      std::vector<std::vector<float>> received(ranks);
      world.run([&](RankContext& ctx) {
        const int r = ctx.rank;
        std::vector<float> mine(static_cast<size_t>(block * ranks));
        for (int dst = 0; dst < ranks; ++dst)
          for (int64_t i = 0; i < block; ++i) mine[dst * block + i] = block_value(r, dst, i);
        Tensor in = Tensor::from({block * ranks}, mine);
        Tensor out = Tensor::zeros({block * ranks}, MemCategory::workspace);
        ctx.comm->all_to_all(in, out);
        received[r] = out.to_vector();
      });
      for (int r = 0; r < ranks; ++r)
        for (int src = 0; src < ranks; ++src)
          for (int64_t i = 0; i < block; ++i)
            REQUIRE(received[r][src * block + i] == block_value(src, r, i));
      // Bytes on the wire, measured in the send path: N-1 blocks, never the rank's own.
      for (const auto& e : world.collect_trace().events) {
        REQUIRE(e.op == "all_to_all");
        CHECK(e.cat == trace::cat::comm);
        CHECK(e.bytes == block * ranks * 4);
        CHECK(e.sent_bytes == (ranks - 1) * block * 4);
      }
    }
  }
}

TEST_CASE("reduce_scatter_async and all_gather_async equal the blocking forms bit for bit",
          "[comm][local][async]") {
  for (int ranks : {1, 2, 3, 5, 8}) {
    for (int64_t n : {1, 7, 1025}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        INFO("ranks=" << ranks << " n=" << n << " op=" << comm::reduce_op_name(op));
        World world(options_for(ranks));
        std::vector<std::vector<float>> sync_rs(ranks), async_rs(ranks), sync_ag(ranks),
            async_ag(ranks);
        world.run([&](RankContext& ctx) {
          const int r = ctx.rank;
          auto [b, e] = comm::chunk_range(n, ranks, r);
          // Inputs that do not sum exactly in float, so a different order would show.
          std::vector<float> input(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) input[i] = 1.0f / static_cast<float>(3 + r + 7 * i);
          Tensor in = Tensor::from({n}, input);
          Tensor out = Tensor::zeros({e - b}, MemCategory::workspace);
          ctx.comm->reduce_scatter(in, out, op);
          sync_rs[r] = out.to_vector();
          Tensor out_async = Tensor::zeros({e - b}, MemCategory::workspace);
          comm::Work rs = ctx.comm->reduce_scatter_async(in, out_async, op);
          rs.wait();
          async_rs[r] = out_async.to_vector();

          Tensor all = Tensor::zeros({n}, MemCategory::workspace);
          ctx.comm->all_gather(out, all);
          sync_ag[r] = all.to_vector();
          Tensor all_async = Tensor::zeros({n}, MemCategory::workspace);
          comm::Work ag = ctx.comm->all_gather_async(out, all_async);
          ag.wait();
          async_ag[r] = all_async.to_vector();
        });
        for (int r = 0; r < ranks; ++r) {
          CHECK(async_rs[r] == sync_rs[r]);
          CHECK(async_ag[r] == sync_ag[r]);
          CHECK(sync_ag[r] == sync_ag[0]);
        }
        for (const auto& e : world.collect_trace().events)
          CHECK((e.op == "reduce_scatter" || e.op == "all_gather"));
      }
    }
  }
}

TEST_CASE("async reduce_scatter/all_gather leave the compute lane free until wait()",
          "[comm][local][async][clock]") {
  WorldOptions o = options_for(4);
  o.clock = ClockKind::modeled;
  World world(o);
  std::vector<double> after_issue(4), after_wait(4), blocking_end(4);
  world.run([&](RankContext& ctx) {
    const int64_t n = 4096;
    Tensor in = Tensor::zeros({n}, MemCategory::gradients);
    Tensor chunk = Tensor::zeros({n / 4}, MemCategory::gradients);
    Tensor all = Tensor::zeros({n}, MemCategory::parameters);
    comm::Work rs = ctx.comm->reduce_scatter_async(in, chunk);
    comm::Work ag = ctx.comm->all_gather_async(chunk, all);
    after_issue[ctx.rank] = ctx.clock.compute_now();
    rs.wait();
    ag.wait();
    after_wait[ctx.rank] = ctx.clock.compute_now();
    ctx.comm->reduce_scatter(in, chunk);
    ctx.comm->all_gather(chunk, all);
    blocking_end[ctx.rank] = ctx.clock.compute_now();
  });
  for (int r = 0; r < 4; ++r) {
    CHECK(after_issue[r] == 0);
    CHECK(after_wait[r] > 0);
    // The blocking pair takes exactly as long as the async pair did.
    CHECK(blocking_end[r] == Approx(2 * after_wait[r]).epsilon(1e-12));
  }
}

TEST_CASE("all_to_all with a length not divisible by the ranks is a CommError naming the sizes",
          "[comm][local][all_to_all]") {
  World world(options_for(4));
  std::string message = run_expecting_failure(world, [](RankContext& ctx) {
    Tensor in = Tensor::zeros({10}, MemCategory::workspace);
    Tensor out = Tensor::zeros({10}, MemCategory::workspace);
    ctx.comm->all_to_all(in, out);
  });
  CHECK_THAT(message, Contains("all_to_all"));
  CHECK_THAT(message, Contains("10 elements"));
  CHECK_THAT(message, Contains("4 equal blocks"));

  World world2(options_for(2));
  message = run_expecting_failure(world2, [](RankContext& ctx) {
    Tensor in = Tensor::zeros({8}, MemCategory::workspace);
    Tensor out = Tensor::zeros({6}, MemCategory::workspace);
    ctx.comm->all_to_all(in, out);
  });
  CHECK_THAT(message, Contains("out has 6 f32 elements, in has 8 f32"));
}

TEST_CASE("one rank in all_to_all, another in all_gather: the mismatch table, not a hang",
          "[comm][local][all_to_all][diagnosis]") {
  World world(options_for(2));
  std::string message = run_expecting_failure(world, [](RankContext& ctx) {
    Tensor buffer = Tensor::zeros({8}, MemCategory::workspace);
    Tensor out = Tensor::zeros({8}, MemCategory::workspace);
    if (ctx.rank == 0) {
      ctx.comm->all_to_all(buffer, out);
    } else {
      Tensor mine = Tensor::zeros({4}, MemCategory::workspace);
      ctx.comm->all_gather(mine, out);
    }
  });
  CHECK_THAT(message, Contains("collective #0 in group world does not match"));
  CHECK_THAT(message, Contains("rank 0 called all_to_all(count=8, f32)"));
  CHECK_THAT(message, Contains("rank 1 called all_gather(count=8, f32)"));
}

TEST_CASE("all_to_all inside split groups exchanges within each group only",
          "[comm][local][all_to_all]") {
  World world(options_for(8));
  std::vector<std::vector<float>> received(8);
  world.run([&](RankContext& ctx) {
    // Two groups of 4 (even / odd world ranks), ordered by world rank; block j goes to group
    // rank j, whose world rank is 2j + color.
    auto group = ctx.comm->split(ctx.rank % 2, ctx.rank, ctx.rank % 2 ? "odd" : "even");
    std::vector<float> mine(4 * 3);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) mine[j * 3 + i] = block_value(ctx.rank, 2 * j + ctx.rank % 2, i);
    Tensor in = Tensor::from({12}, mine);
    Tensor out = Tensor::zeros({12}, MemCategory::workspace);
    group->all_to_all(in, out);
    received[ctx.rank] = out.to_vector();
  });
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) CHECK(received[r][j * 3 + i] == block_value(2 * j + r % 2, r, i));
}

TEST_CASE("all_to_all on phantom tensors: timing and bytes only", "[comm][local][all_to_all]") {
  WorldOptions o = options_for(4);
  o.device = DeviceKind::phantom;
  World world(o);
  world.run([](RankContext& ctx) {
    Tensor in = Tensor::empty({1 << 20}, MemCategory::activations);
    Tensor out = Tensor::empty({1 << 20}, MemCategory::activations);
    ctx.comm->all_to_all(in, out);
  });
  auto trace = world.collect_trace();
  REQUIRE(trace.events.size() == 4);
  for (const auto& e : trace.events) {
    CHECK(e.op == "all_to_all");
    CHECK(e.sent_bytes == 3 * (1 << 20));  // 3 of 4 blocks of 1 MiB leave the rank
    CHECK(e.dur > 0);
  }
}

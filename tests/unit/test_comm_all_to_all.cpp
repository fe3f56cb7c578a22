// all_to_all, all_to_all_v and the async reduce-scatter / all-gather on the local backend: the
// right blocks reach the right ranks, the bytes on the wire are the rank's own sends, the async
// forms equal the sync ones bit for bit, and wrong sizes, mismatched calls or counts are clear
// errors, not hangs. all_to_all_v on the planner's symmetric groups, priced as the full run.
#include <catch2/catch.hpp>

#include <functional>
#include <numeric>

#include "common/collective_reference.h"
#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/comm/cost_model.h"
#include "core/comm/symmetric.h"
#include "core/theory/collectives.h"
#include "core/world/world.h"

namespace test_comm_all_to_all {

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

// ---- all_to_all_v: variable blocks (MoE token dispatch) ----

namespace {

// How many elements rank `src` sends to rank `dst` in the uneven pattern: sizes that differ per
// pair, zeros among them, and rank 1 sending nothing at all.
int64_t uneven_count(int src, int dst) {
  if (src == 1) return 0;
  return (3 * src + 2 * dst + 1) % 5;  // 0..4
}

std::vector<int64_t> send_counts_of(int src, int ranks) {
  std::vector<int64_t> c(ranks);
  for (int dst = 0; dst < ranks; ++dst) c[dst] = uneven_count(src, dst);
  return c;
}
std::vector<int64_t> recv_counts_of(int dst, int ranks) {
  std::vector<int64_t> c(ranks);
  for (int src = 0; src < ranks; ++src) c[src] = uneven_count(src, dst);
  return c;
}
int64_t sum_of(const std::vector<int64_t>& c) {
  return std::accumulate(c.begin(), c.end(), int64_t{0});
}

}  // namespace

TEST_CASE("all_to_all_v: uneven blocks land in source order, 1 2 and 4 ranks",
          "[comm][local][all_to_all_v]") {
  for (int ranks : {1, 2, 4}) {
    INFO("ranks=" << ranks);
    World world(options_for(ranks));
    std::vector<std::vector<float>> received(ranks);
    world.run([&](RankContext& ctx) {
      const int r = ctx.rank;
      const auto send = send_counts_of(r, ranks), recv = recv_counts_of(r, ranks);
      std::vector<float> mine;
      for (int dst = 0; dst < ranks; ++dst)
        for (int64_t i = 0; i < send[dst]; ++i) mine.push_back(block_value(r, dst, i));
      Tensor in = Tensor::from({sum_of(send)}, mine);
      Tensor out = Tensor::zeros({sum_of(recv)}, MemCategory::workspace);
      ctx.comm->all_to_all_v(in, send, out, recv);
      received[r] = out.to_vector();
    });
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> expected;
      for (int src = 0; src < ranks; ++src)
        for (int64_t i = 0; i < uneven_count(src, r); ++i)
          expected.push_back(block_value(src, r, i));
      CHECK(received[r] == expected);
    }
    // One event per rank: bytes = what it sends (own block included, as all_to_all), sent_bytes
    // = what left it (its own block stays; a zero count is no message).
    const auto events = world.collect_trace().events;
    REQUIRE(static_cast<int>(events.size()) == ranks);
    for (const auto& e : events) {
      REQUIRE(e.op == "all_to_all_v");
      const auto send = send_counts_of(e.rank, ranks);
      CHECK(e.bytes == sum_of(send) * 4);
      CHECK(e.sent_bytes == (sum_of(send) - send[e.rank]) * 4);
    }
  }
}

TEST_CASE("all_to_all_v: a send count its partner does not expect is a CommError on every member",
          "[comm][local][all_to_all_v][diagnosis]") {
  World world(options_for(4));
  std::vector<std::string> messages(4);
  world.run([&](RankContext& ctx) {
    const int r = ctx.rank;
    auto send = send_counts_of(r, 4), recv = recv_counts_of(r, 4);
    if (r == 2) send[1] += 3;  // rank 1 still expects uneven_count(2, 1) = 4 elements
    Tensor in = Tensor::zeros({sum_of(send)}, MemCategory::workspace);
    Tensor out = Tensor::zeros({sum_of(recv)}, MemCategory::workspace);
    try {
      ctx.comm->all_to_all_v(in, send, out, recv);
    } catch (const comm::CommError& e) {
      messages[r] = e.what();
    }
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK_THAT(messages[r], Contains("all_to_all_v #0 in group world: rank 2 sends 7 elements to "
                                     "rank 1, which expects 4 from it"));
    CHECK(messages[r] == messages[0]);
  }
}

TEST_CASE("all_to_all_v: counts that do not fit the buffers, or one count short, are one line",
          "[comm][local][all_to_all_v]") {
  World world(options_for(2));
  std::string message = run_expecting_failure(world, [](RankContext& ctx) {
    const std::vector<int64_t> send{2, 3}, recv{2, 3};
    Tensor in = Tensor::zeros({4}, MemCategory::workspace);
    Tensor out = Tensor::zeros({5}, MemCategory::workspace);
    ctx.comm->all_to_all_v(in, send, out, recv);
  });
  CHECK_THAT(message, Contains("in has 4 elements and out 5, but send_counts sum to 5"));

  World world2(options_for(2));
  message = run_expecting_failure(world2, [](RankContext& ctx) {
    const std::vector<int64_t> send{2}, recv{1, 1};
    Tensor in = Tensor::zeros({2}, MemCategory::workspace);
    Tensor out = Tensor::zeros({2}, MemCategory::workspace);
    ctx.comm->all_to_all_v(in, send, out, recv);
  });
  CHECK_THAT(message, Contains("send_counts has 1 entries; it needs one per group rank (2)"));
}

TEST_CASE("all_to_all_v: members compare the call without its counts, which differ per rank",
          "[comm][local][all_to_all_v][diagnosis]") {
  World world(options_for(2));
  std::string message = run_expecting_failure(world, [](RankContext& ctx) {
    const std::vector<int64_t> counts{1, 1};
    const DType type = ctx.rank == 0 ? DType::f32 : DType::bf16;
    Tensor in = Tensor::zeros({2}, MemCategory::workspace, type);
    Tensor out = Tensor::zeros({2}, MemCategory::workspace, type);
    ctx.comm->all_to_all_v(in, counts, out, counts);
  });
  CHECK_THAT(message, Contains("rank 0 called all_to_all_v(f32)"));
  CHECK_THAT(message, Contains("rank 1 called all_to_all_v(bf16)"));
}

namespace {

// A pattern every member sees alike: rank r sends rotation[(j - r) mod N] elements to rank j, so
// each pairwise step moves equal blocks and a symmetric group's mirrors are exact. Not
// symmetric in the pair (rank 0 sends 3 to rank 1 but receives 0 from it): what the mirror needs
// is the same count at the same distance, not send_counts == recv_counts.
std::vector<int64_t> rotated(const std::vector<int64_t>& rotation, int rank, bool sending) {
  const int n = static_cast<int>(rotation.size());
  std::vector<int64_t> c(n);
  for (int j = 0; j < n; ++j) c[j] = rotation[((sending ? j - rank : rank - j) % n + n) % n];
  return c;
}

void rotated_all_to_all_v(comm::Comm& group, const std::vector<int64_t>& rotation, int64_t scale) {
  auto send = rotated(rotation, group.rank(), true), recv = rotated(rotation, group.rank(), false);
  for (auto* c : {&send, &recv})
    for (int64_t& x : *c) x *= scale;
  Tensor in = Tensor::empty({sum_of(send)}, MemCategory::workspace);
  Tensor out = Tensor::empty({sum_of(recv)}, MemCategory::workspace);
  group.all_to_all_v(in, send, out, recv);
}

}  // namespace

TEST_CASE("all_to_all_v on a symmetric group: the full run's time and bytes, mirrored",
          "[comm][symmetric][all_to_all_v]") {
  const std::vector<int64_t> rotation{5, 3, 0, 7};  // to self, 1 ahead, 2 ahead (none), 3 ahead
  WorldOptions o = options_for(4);
  o.device = DeviceKind::phantom;
  o.clock = ClockKind::modeled;
  World full(o);
  std::vector<trace::Event> by_rank(4);
  full.run([&](RankContext& ctx) {
    rotated_all_to_all_v(*ctx.comm, rotation, 1000);
    by_rank[ctx.rank] = ctx.tracer.events().back();
  });
  o.ranks = 1;
  World one(o);
  trace::Event first, second, other_counts;
  std::string refused;
  one.run([&](RankContext& ctx) {
    auto group = comm::make_symmetric_comm(ctx, ctx.profile, {0, 1, 2, 3}, 0, "ep0");
    rotated_all_to_all_v(*group, rotation, 1000);
    first = ctx.tracer.events().back();
    rotated_all_to_all_v(*group, rotation, 1000);  // replayed
    second = ctx.tracer.events().back();
    rotated_all_to_all_v(*group, rotation, 10);  // other counts: not the same replay
    other_counts = ctx.tracer.events().back();
    try {
      // The same send counts as a rotation just run (and recorded for replays), but recv 4 from
      // the member one behind while sending 2 one ahead.
      rotated_all_to_all_v(*group, {1, 2, 3, 4}, 1);
      const std::vector<int64_t> counts{1, 2, 3, 4};
      Tensor in = Tensor::empty({10}, MemCategory::workspace);
      Tensor out = Tensor::empty({10}, MemCategory::workspace);
      group->all_to_all_v(in, counts, out, counts);
    } catch (const comm::CommError& e) {
      refused = e.what();
    }
  });
  CHECK(first.op == "all_to_all_v");
  CHECK(first.bytes == by_rank[0].bytes);
  CHECK(first.sent_bytes == by_rank[0].sent_bytes);
  CHECK(first.sent_bytes == 10000 * 4);  // 3 + 0 + 7 thousand elements leave rank 0
  CHECK(first.dur == Approx(by_rank[0].dur).epsilon(1e-12));
  // ... and the cost model's price of the same counts
  std::vector<int64_t> matrix;
  for (int r = 0; r < 4; ++r)
    for (int64_t c : rotated(rotation, r, true)) matrix.push_back(c * 1000);
  CHECK(first.dur == Approx(comm::all_to_all_v_time(matrix, 4, 4, o.profile)).epsilon(1e-12));
  CHECK(second.dur == first.dur);
  CHECK(second.sent_bytes == first.sent_bytes);
  CHECK(other_counts.sent_bytes == first.sent_bytes / 100);
  CHECK(other_counts.dur < first.dur);
  CHECK_THAT(refused, Contains("all_to_all_v on symmetric group ep0: recv_counts[3] is 4 but "
                               "send_counts[1] is 2"));
  CHECK(refused.find('\n') == std::string::npos);
}

TEST_CASE("the MoE dispatch bytes: the formula equals the trace, balanced or not",
          "[comm][theory][all_to_all_v]") {
  // Uneven: what the trace measured in the first all_to_all_v case, from the counts.
  for (int r = 0; r < 4; ++r) {
    const auto send = send_counts_of(r, 4);
    CHECK(theory::moe_dispatch_sent_bytes(send, r, 1, 4) == (sum_of(send) - send[r]) * 4);
  }
  // Balanced: 64 tokens x top-2 over ep = 4, rows of C = 8 fp32 values: every rank sends 32 rows
  // to each rank, 96 of them to others.
  const std::vector<int64_t> balanced(4, 32);
  CHECK(theory::moe_dispatch_sent_bytes(balanced, 1, 8, 4) == 96 * 8 * 4);
  CHECK(theory::moe_dispatch_sent_bytes_balanced(64, 2, 8, 4, 4) == 96 * 8 * 4);
  CHECK(theory::moe_dispatch_sent_bytes_balanced(64, 2, 8, 4, 1) == 0);
}

TEST_CASE("the cost model prices all_to_all_v with equal counts as all_to_all",
          "[comm][theory][all_to_all_v]") {
  const HardwareProfile profile = HardwareProfile::load("2x8xH100-IB");  // mixed links
  const int64_t block = 1 << 16;
  const std::vector<int64_t> equal(16 * 16, block);
  const double a2a = comm::alpha_beta_time("all_to_all", block * 16, 4, 16, profile);
  CHECK(comm::all_to_all_v_time(equal, 4, 16, profile) == Approx(a2a).epsilon(1e-12));
  CHECK(comm::alpha_beta_time("all_to_all_v", block * 16, 4, 16, profile) == a2a);
}

}  // namespace test_comm_all_to_all

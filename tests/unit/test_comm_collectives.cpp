// Every collective on the local backend, for N = 1..8 ranks and awkward lengths, against a
// serial reference; point-to-point ordering; split groups; each rank's trace event (bytes,
// sent_bytes, seq, modeled time) against the shared rules a backend without messages of its own
// (NCCL) records by.
#include <catch2/catch.hpp>

#include "common/collective_reference.h"

#include <cmath>
#include <mutex>

#include "common/collective_script.h"
#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/trace/analysis.h"
#include "core/world/world.h"

namespace test_comm_collectives {

using namespace mgpu;
using comm::ReduceOp;

namespace {

WorldOptions options_for(int ranks) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = 10;
  return o;
}

void require_equal(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]));
}

const int64_t kSizes[] = {0, 1, 2, 7, 1000, 1025};

}  // namespace

TEST_CASE("chunk_range splits any length, first n % N chunks one longer", "[comm]") {
  CHECK(comm::chunk_range(7, 3, 0) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(comm::chunk_range(7, 3, 1) == std::pair<int64_t, int64_t>{3, 5});
  CHECK(comm::chunk_range(7, 3, 2) == std::pair<int64_t, int64_t>{5, 7});
  CHECK(comm::chunk_range(1, 4, 3) == std::pair<int64_t, int64_t>{1, 1});
}

TEST_CASE("all_reduce, reduce_scatter, all_gather, broadcast match a serial reference",
          "[comm][local]") {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    World world(options_for(ranks));
    for (int64_t n : kSizes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        INFO("ranks=" << ranks << " n=" << n << " op=" << comm::reduce_op_name(op));
        auto want = testing::serial_reduce(ranks, n, op);
        std::vector<std::vector<float>> reduced(ranks), async(ranks), scattered(ranks),
            gathered(ranks), broadcasted(ranks);
        world.run([&](RankContext& ctx) {
          int r = ctx.rank;
          Tensor t = Tensor::from({n}, testing::rank_input(r, n));
          ctx.comm->all_reduce(t, op);
          reduced[r] = t.to_vector();

          Tensor u = Tensor::from({n}, testing::rank_input(r, n));
          comm::Work w = ctx.comm->all_reduce_async(u, op);
          w.wait();
          async[r] = u.to_vector();

          auto [b, e] = comm::chunk_range(n, ranks, r);
          Tensor in = Tensor::from({n}, testing::rank_input(r, n));
          Tensor out = Tensor::empty({e - b}, MemCategory::workspace);
          ctx.comm->reduce_scatter(in, out, op);
          scattered[r] = out.to_vector();

          Tensor mine =
              Tensor::from({e - b}, std::vector<float>(want.begin() + b, want.begin() + e));
          Tensor all = Tensor::empty({n}, MemCategory::workspace);
          ctx.comm->all_gather(mine, all);
          gathered[r] = all.to_vector();

          int root = (ranks - 1) / 2;
          Tensor bc = Tensor::from({n}, testing::rank_input(r, n));
          ctx.comm->broadcast(bc, root);
          broadcasted[r] = bc.to_vector();
          ctx.comm->barrier();
        });
        for (int r = 0; r < ranks; ++r) {
          require_equal(reduced[r], want);
          require_equal(async[r], want);
          auto [b, e] = comm::chunk_range(n, ranks, r);
          require_equal(scattered[r], std::vector<float>(want.begin() + b, want.begin() + e));
          require_equal(gathered[r], want);
          require_equal(broadcasted[r], testing::rank_input((ranks - 1) / 2, n));
        }
      }
    }
  }
}

TEST_CASE(
    "reduce_scatter reads its input, sums as all_reduce does, and holds two chunks of "
    "scratch, not a copy of the input",
    "[comm][local]") {
  // Values that are not small integers, so that the order of the additions shows in the bits.
  auto values = [](int rank, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i + 1) * (rank + 1));
    return v;
  };
  const int64_t n = 4099;  // chunks of two lengths
  for (int ranks = 1; ranks <= 8; ++ranks) {
    INFO("ranks=" << ranks);
    World world(options_for(ranks));
    std::mutex m;
    world.run([&](RankContext& ctx) {
      const int r = ctx.rank;
      auto [b, e] = comm::chunk_range(n, ranks, r);
      Tensor summed = Tensor::from({n}, values(r, n));
      ctx.comm->all_reduce(summed);
      const std::vector<float> all_reduce_chunk = summed.flat_range(b, e).to_vector();

      Tensor in = Tensor::from({n}, values(r, n));
      Tensor out = Tensor::empty({e - b}, MemCategory::workspace);
      ctx.allocator.reset_peaks();
      const int64_t before = ctx.allocator.stats().current[int(MemCategory::comm_buffers)];
      ctx.comm->reduce_scatter(in, out, ReduceOp::sum);
      const int64_t scratch = ctx.allocator.stats().peak[int(MemCategory::comm_buffers)] - before;
      const int64_t largest = comm::chunk_range(n, ranks, 0).second;

      // In place: the result lands on this rank's own chunk of the input.
      Tensor in_place = Tensor::from({n}, values(r, n));
      Tensor my_chunk = in_place.flat_range(b, e);
      ctx.comm->reduce_scatter(in_place, my_chunk, ReduceOp::sum);

      std::lock_guard<std::mutex> lock(m);
      INFO("rank " << r);
      CHECK(in.to_vector() == values(r, n));
      CHECK(out.to_vector() == all_reduce_chunk);  // bit for bit: the same additions in order
      CHECK(my_chunk.to_vector() == all_reduce_chunk);
      CHECK(scratch == std::min(std::max(ranks - 2, 0), 2) * largest * int64_t(sizeof(float)));
    });
  }
}

TEST_CASE("messages between a pair with one tag arrive in order; irecvs match in post order",
          "[comm][local]") {
  World world(options_for(2));
  std::vector<float> got, got_async;
  float other_tag = 0;
  world.run([&](RankContext& ctx) {
    if (ctx.rank == 0) {
      for (int i = 0; i < 5; ++i) ctx.comm->send(Tensor::from({1}, {float(i)}), 1, 3);
      ctx.comm->send(Tensor::from({1}, {100.0f}), 1, 4);  // another tag: its own queue
      for (int i = 0; i < 3; ++i) ctx.comm->send(Tensor::from({1}, {float(10 + i)}), 1, 5);
    } else {
      Tensor other = Tensor::empty({1}, MemCategory::workspace);
      ctx.comm->recv(other, 0, 4);
      other_tag = other.to_vector()[0];
      for (int i = 0; i < 5; ++i) {
        Tensor t = Tensor::empty({1}, MemCategory::workspace);
        ctx.comm->recv(t, 0, 3);
        got.push_back(t.to_vector()[0]);
      }
      std::vector<Tensor> bufs;
      std::vector<comm::Work> works;
      for (int i = 0; i < 3; ++i) bufs.push_back(Tensor::empty({1}, MemCategory::workspace));
      for (int i = 0; i < 3; ++i) works.push_back(ctx.comm->irecv(bufs[i], 0, 5));
      for (int i = 2; i >= 0; --i) works[i].wait();  // waited in reverse order
      for (auto& b : bufs) got_async.push_back(b.to_vector()[0]);
    }
  });
  CHECK(other_tag == 100.0f);
  CHECK(got == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(got_async == std::vector<float>{10, 11, 12});
}

TEST_CASE("split: 8 ranks into 2 groups of 4 doing independent all-reduces", "[comm][local]") {
  World world(options_for(8));
  std::vector<float> result(8);
  std::vector<std::string> names(8);
  std::vector<int> group_rank(8), group_size(8);
  world.run([&](RankContext& ctx) {
    int color = ctx.rank % 2;
    // key reverses the order inside each group
    auto group = ctx.comm->split(color, -ctx.rank, color ? "odd" : "even");
    group_size[ctx.rank] = group->size();
    Tensor t = Tensor::from({3}, {float(ctx.rank), 1.0f, 2.0f});
    group->all_reduce(t);
    result[ctx.rank] = t.to_vector()[0];
    names[ctx.rank] = group->name();
    group_rank[ctx.rank] = group->rank();
    ctx.comm->all_reduce(t);  // the world group still works after the split
  });
  for (int r = 0; r < 8; ++r) {
    CHECK(group_size[r] == 4);
    CHECK(result[r] == (r % 2 ? 1 + 3 + 5 + 7 : 0 + 2 + 4 + 6));
    CHECK(names[r] == (r % 2 ? "odd" : "even"));
  }
  CHECK(group_rank[6] == 0);
  CHECK(group_rank[0] == 3);
}

TEST_CASE("phantom tensors run collectives for timing only", "[comm][local]") {
  WorldOptions o = options_for(4);
  o.device = DeviceKind::phantom;
  World world(o);
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::empty({1000}, MemCategory::gradients);
    ctx.comm->all_reduce(t, ReduceOp::avg);
    ctx.comm->barrier();
  });
  auto trace = world.collect_trace();
  CHECK(trace.events.size() == 8);
  CHECK(trace.events.front().op == "all_reduce");
  CHECK(trace.events.front().bytes == 4000);
}

// ---- bytes on the wire: measured in the send path, not computed ----

namespace {
// The comm events of one op in a trace, one per rank (a world run with one collective).
std::vector<trace::Event> comm_events(const trace::Trace& t, const std::string& op) {
  std::vector<trace::Event> found;
  for (const auto& e : t.events)
    if (e.lane == trace::Lane::comm && e.op == op) found.push_back(e);
  return found;
}
}  // namespace

TEST_CASE("ring all-reduce: each rank's sent_bytes is exactly 2(N-1)/N x S", "[comm][local]") {
  for (int ranks = 2; ranks <= 8; ++ranks) {
    INFO("ranks=" << ranks);
    const int64_t n = 840;  // divisible by 2..8
    const int64_t S = n * 4;
    WorldOptions o = options_for(ranks);
    o.trace = true;
    World world(o);
    world.run([&](RankContext& ctx) {
      Tensor t = Tensor::from({n}, testing::rank_input(ctx.rank, n));
      ctx.comm->all_reduce(t);
    });
    auto events = comm_events(world.collect_trace(), "all_reduce");
    REQUIRE(events.size() == static_cast<size_t>(ranks));
    for (const auto& e : events) {
      CHECK(e.bytes == S);
      CHECK(e.sent_bytes == 2 * (ranks - 1) * S / ranks);
    }
  }
}

TEST_CASE("point-to-point: a send counts its bytes at the sender, a recv sends nothing",
          "[comm][local]") {
  WorldOptions o = options_for(2);
  o.trace = true;
  World world(o);
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({100}, MemCategory::comm_buffers);
    if (ctx.rank == 0)
      ctx.comm->send(t, 1, 3);
    else
      ctx.comm->recv(t, 0, 3);
  });
  trace::Trace t = world.collect_trace();
  auto sends = comm_events(t, "send"), recvs = comm_events(t, "recv");
  REQUIRE(sends.size() == 1);
  REQUIRE(recvs.size() == 1);
  CHECK(sends[0].rank == 0);
  CHECK(sends[0].sent_bytes == 400);
  CHECK(recvs[0].rank == 1);
  CHECK(recvs[0].sent_bytes == 0);
  trace::TraceSummary summary = trace::analyze(t);
  CHECK(summary.ranks[0].wire_bytes == 400);
  CHECK(summary.ranks[1].wire_bytes == 0);
  CHECK(summary.wire_bytes == 400);
}

TEST_CASE("point-to-point: sends to a late receiver, early receiver and an irecv all arrive",
          "[comm][local]") {
  // Exercises the three meeting orders of the one-copy path: receive posted first (the sender
  // copies), offer first (the receiver copies) and a blocking send that buffers and leaves.
  World world(options_for(2));
  std::vector<float> got(6, 0.0f);
  world.run([&](RankContext& ctx) {
    if (ctx.rank == 0) {
      for (int k = 0; k < 3; ++k) {
        Tensor t = Tensor::from({2}, {float(2 * k + 1), float(2 * k + 2)});
        ctx.comm->send(t, 1, 0);
        t.f32()[0] = -1;  // the receiver must not see this: send returned, buffer is ours again
      }
    } else {
      Tensor a = Tensor::zeros({2}, MemCategory::comm_buffers);
      Tensor b = Tensor::zeros({2}, MemCategory::comm_buffers);
      Tensor c = Tensor::zeros({2}, MemCategory::comm_buffers);
      comm::Work first = ctx.comm->irecv(a, 0, 0);
      ctx.comm->recv(b, 0, 0);
      first.wait();
      ctx.comm->recv(c, 0, 0);
      for (int i = 0; i < 2; ++i) {
        got[i] = a.f32()[i];
        got[2 + i] = b.f32()[i];
        got[4 + i] = c.f32()[i];
      }
    }
  });
  CHECK(got == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("every collective's sent_bytes and modeled time follow the shared rules on every rank",
          "[comm][local][trace]") {
  // Members start together, or each 10 us after the rank before it (about a message's time).
  // Two ranks per node, a slow link between nodes: the members' world ranks decide each step.
  HardwareProfile profile = HardwareProfile::ideal(0);
  profile.ranks_per_node = 2;
  profile.intra_node = {"fast", 1e9, 1e-6};
  profile.inter_node = {"slow", 1e8, 1e-5};
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (int64_t n : {1, 3, 7, 1001})
      for (double stagger : {0.0, 1e-5}) {
        INFO("ranks=" << ranks << " n=" << n << " stagger=" << stagger);
        WorldOptions o = options_for(ranks);
        o.trace = true;
        o.profile = profile;
        World world(o);
        std::vector<std::vector<testing::ScriptedCall>> expected(ranks);
        world.run([&](RankContext& ctx) {
          auto calls = testing::run_every_collective(ctx, *ctx.comm, n, 1.0, 0, stagger);
          if (ranks >= 3) {  // a group whose members are not 0..k-1 in order: odd ranks reversed
            auto group = ctx.comm->split(ctx.rank % 2, -ctx.rank, ctx.rank % 2 ? "odd" : "even");
            auto more = testing::run_every_collective(ctx, *group, n, 100.0, 0, stagger);
            calls.insert(calls.end(), more.begin(), more.end());
          }
          expected[ctx.rank] = std::move(calls);
        });
        const trace::Trace t = world.collect_trace();
        for (int r = 0; r < ranks; ++r)
          for (const auto& call : expected[r]) {
            INFO("rank " << r << ": " << call.op << " in " << call.group << " at " << call.start);
            const trace::Event* found = nullptr;
            for (const auto& e : t.events)
              if (e.rank == r && e.lane == trace::Lane::comm && e.op == call.op &&
                  e.start >= call.start && e.start < call.start + 0.5)
                found = &e;
            REQUIRE(found);
            CHECK(found->group == call.group);
            CHECK(found->bytes == call.bytes);
            CHECK(found->sent_bytes == call.sent_bytes);
            CHECK(found->seq == call.seq);
            CHECK(found->peer == call.peer);
            if (call.seq >= 0) CHECK(found->start == call.start);
            if (call.modeled_dur >= 0) CHECK(found->dur == Approx(call.modeled_dur).margin(1e-12));
          }
      }
  }
}

TEST_CASE("all_to_all_v seen by one member: equal counts on one kind of link, all_to_all's time",
          "[comm][trace]") {
  HardwareProfile profile = HardwareProfile::ideal(0);
  profile.intra_node = profile.inter_node = {"link", 1e9, 1e-6};
  const std::vector<int> members = {4, 1, 2, 0, 3};
  const std::vector<int64_t> counts(members.size(), 6);
  const auto ends = comm::member_end_times("all_to_all", members, 30, 4, 0, profile);
  for (int r = 0; r < 5; ++r)
    CHECK(comm::all_to_all_v_member_time(members, r, counts, counts, 4, profile) ==
          Approx(ends[r]).margin(1e-15));
}

}  // namespace test_comm_collectives

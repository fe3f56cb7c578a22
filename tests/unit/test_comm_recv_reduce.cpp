// Comm::recv_reduce (receive and add in one pass) must equal recv into a temporary + add_into bit
// for bit, whichever side of the local mailbox does the add, cost the same on the modeled clock
// and in the trace, and keep the deadlock / size-mismatch diagnosis of a plain recv. Also: which
// side of a local mailbox copies a plain receive.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "common/selected_seams.h"
#include "core/comm/algorithms/algorithms.h"
#include "core/comm/comm.h"
#include "core/comm/cost_model.h"
#include "core/comm/local/local_world.h"
#include "core/world/world.h"

namespace test_comm_recv_reduce {

using namespace mgpu;
using Catch::Matchers::Contains;

namespace {

// Values of mixed sign and magnitude, so a different summation would change low bits.
std::vector<float> noisy(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

// acc + x as recv into a temporary + add_into computes it: the reference for every path.
std::vector<float> recv_then_add(const std::vector<float>& acc, const std::vector<float>& x) {
  Tensor a = Tensor::from({static_cast<int64_t>(acc.size())}, acc);
  comm::algorithms::add_into(a, Tensor::from({static_cast<int64_t>(x.size())}, x));
  return a.to_vector();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

WorldOptions local_world(int ranks, ClockKind clock = ClockKind::modeled) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.clock = clock;
  o.comm_timeout = 20;
  HardwareProfile p = HardwareProfile::ideal(1e-3);  // 1 ms kernels, 1 us + bytes / 1 GB/s
  p.intra_node = {"test link", 1e9, 1e-6};
  p.inter_node = p.intra_node;
  o.profile = p;
  return o;
}

}  // namespace

// The meeting orders of a local mailbox, driven from one thread so each is certain: the receive
// posted first (when ranks share cores the sender adds into it at once; with a core each it only
// offers, and the receiver adds), the offer first (the receiver adds from the sender's buffer),
// and the offer released before the receiver came (it adds from the spare); the offer first also
// with receive(), a blocking receive's reserve() + take() under one lock.
TEST_CASE("local mailbox: recv_reduce adds like recv + add in every meeting order",
          "[comm][local]") {
  const int64_t n = 1037;
  const auto x = noisy(n, 1), start = noisy(n, 2);
  const auto expected = recv_then_add(start, x);
  auto describe = [] { return std::string("waits in the test"); };
  const comm::local::Outgoing message{x.data(), n * 4, DeviceKind::cpu, 0.0};
  for (bool shared : {true, false}) {
    DYNAMIC_SECTION((shared ? "ranks share cores" : "a core per rank")) {
      comm::local::LocalWorld world(2, 20, shared);
      world.begin_run();
      int tag = 0;
      for (const char* order : {"receive posted first", "offer first", "offer first, receive()",
                                "offer released first"}) {
        SECTION(order) {
          std::vector<float> acc = start;
          const comm::local::MailboxKey key{"world", 0, 1, tag++, false};
          const comm::local::Incoming target{acc.data(), n * 4, DeviceKind::cpu, true};
          if (std::string(order) == "receive posted first") {
            int64_t ticket = world.reserve(key, target);
            const auto offer = world.post(key, message);
            // Shared cores: the sender has added into acc already. A core each: not yet.
            CHECK(same_bits(acc, shared ? expected : start));
            CHECK(offer.delivered == shared);
            world.release(key, offer);
            CHECK(world.take(key, ticket, 1, describe).bytes == n * 4);
          } else if (std::string(order) == "offer first") {
            const auto offer = world.post(key, message);
            CHECK(world.take(key, world.reserve(key, target), 1, describe).bytes == n * 4);
            world.release(key, offer);
          } else if (std::string(order) == "offer first, receive()") {
            const auto offer = world.post(key, message);
            CHECK(world.receive(key, target, 1, describe).bytes == n * 4);
            world.release(key, offer);
          } else {
            world.release(key, world.post(key, message));  // buffered in a spare: sender leaves
            CHECK(world.take(key, world.reserve(key, target), 1, describe).bytes == n * 4);
          }
          CHECK(same_bits(acc, expected));
        }
      }
    }
  }
}

// With a core per rank the receiver copies, except into memory its sender has just read (the
// ring all-gather after the reduce-scatter): there the sender copies, at post() when the receive
// is already posted, else when release() finds it posted. Driven from one thread: rank 0 first
// reads rank 1's buffer `theirs` (a recv_reduce, as in the reduce-scatter), then sends into it.
TEST_CASE("local mailbox: a receive into memory its sender just read is copied by the sender",
          "[comm][local]") {
  const int64_t n = 1037;
  const auto mine_values = noisy(n, 3), theirs_values = noisy(n, 4);
  auto describe = [] { return std::string("waits in the test"); };
  comm::local::LocalWorld world(2, 20, /*ranks_share_cores=*/false);
  world.begin_run();
  std::vector<float> mine = mine_values, theirs = theirs_values, elsewhere(n, 0.0f);
  const comm::local::MailboxKey to_rank0{"world", 1, 0, 0, true}, to_rank1{"world", 0, 1, 0, true};
  const comm::local::Outgoing from_theirs{theirs.data(), n * 4, DeviceKind::cpu, 0.0};
  const comm::local::Outgoing from_mine{mine.data(), n * 4, DeviceKind::cpu, 0.0};
  auto reduce_scatter_step = [&] {  // rank 0 reads `theirs`: mine += theirs
    const auto offer = world.post(to_rank0, from_theirs);
    world.receive(to_rank0, {mine.data(), n * 4, DeviceKind::cpu, true}, 0, describe);
    world.release(to_rank0, offer);
  };
  reduce_scatter_step();
  const std::vector<float> sum = mine;

  SECTION("receive posted first: post() copies") {
    const int64_t ticket = world.reserve(to_rank1, {theirs.data(), n * 4, DeviceKind::cpu, false});
    const auto offer = world.post(to_rank1, from_mine);
    CHECK(offer.delivered);
    CHECK(same_bits(theirs, sum));  // before the receiver looked
    world.release(to_rank1, offer);
    CHECK(world.take(to_rank1, ticket, 1, describe).bytes == n * 4);
  }
  SECTION("offer first: release() copies once the receive is posted") {
    const auto offer = world.post(to_rank1, from_mine);
    CHECK_FALSE(offer.delivered);
    const int64_t ticket = world.reserve(to_rank1, {theirs.data(), n * 4, DeviceKind::cpu, false});
    world.release(to_rank1, offer);
    CHECK(same_bits(theirs, sum));  // the sender copied; the receiver has not taken yet
    CHECK(world.take(to_rank1, ticket, 1, describe).bytes == n * 4);
  }
  SECTION("other memory, or an add: the receiver still copies") {
    const int64_t ticket =
        world.reserve(to_rank1, {elsewhere.data(), n * 4, DeviceKind::cpu, false});
    auto offer = world.post(to_rank1, from_mine);
    CHECK_FALSE(offer.delivered);
    CHECK(world.take(to_rank1, ticket, 1, describe).bytes == n * 4);
    world.release(to_rank1, offer);
    CHECK(same_bits(elsewhere, sum));
    const int64_t add_ticket =
        world.reserve(to_rank1, {theirs.data(), n * 4, DeviceKind::cpu, true});
    offer = world.post(to_rank1, from_mine);
    CHECK_FALSE(offer.delivered);
    CHECK(world.take(to_rank1, add_ticket, 1, describe).bytes == n * 4);
    world.release(to_rank1, offer);
  }
  CHECK(same_bits(mine, sum));
}

// Two worlds, the same messages: one receiver uses recv_reduce, the other recv + add_into. The
// sums, the comm events of the modeled trace and the clocks must be identical.
TEST_CASE("recv_reduce costs what recv + add cost: same sums and clock and comm trace",
          "[comm][local][clock]") {
  const int64_t n = 5000;
  struct Run {
    std::vector<float> sum;
    double compute_now = 0, comm_now = 0;
    std::vector<trace::Event> comm_events;
  };
  auto run = [&](bool fused) {
    WorldOptions o = local_world(2);
    o.trace = true;
    World world(o);
    Run result;
    world.run([&](RankContext& ctx) {
      if (ctx.rank == 0) {
        for (int k = 0; k < 3; ++k) {
          { KernelScope compute("produce", 0, 0); }  // the receiver is early, then late
          ctx.comm->send(Tensor::from({n}, noisy(n, 10 + k)), 1, 4);
        }
      } else {
        Tensor acc = Tensor::from({n}, noisy(n, 3));
        for (int k = 0; k < 3; ++k) {
          if (k == 2) {  // busy for 2 ms: the last message waits for its receiver
            { KernelScope busy("busy", 0, 0); }
            { KernelScope still_busy("busy", 0, 0); }
          }
          if (fused) {
            ctx.comm->recv_reduce(acc, 0, 4);
          } else {
            Tensor incoming = Tensor::empty({n}, MemCategory::comm_buffers);
            ctx.comm->recv(incoming, 0, 4);
            comm::algorithms::add_into(acc, incoming);
          }
        }
        result.sum = acc.to_vector();
        result.compute_now = ctx.clock.compute_now();
        result.comm_now = ctx.clock.comm_now();
      }
    });
    for (const auto& e : world.collect_trace().events)
      if (e.cat == trace::cat::comm) result.comm_events.push_back(e);
    return result;
  };
  const Run fused = run(true), unfused = run(false);
  CHECK(same_bits(fused.sum, unfused.sum));
  CHECK(fused.compute_now == unfused.compute_now);
  CHECK(fused.comm_now == unfused.comm_now);
  REQUIRE(fused.comm_events.size() == unfused.comm_events.size());
  for (size_t i = 0; i < fused.comm_events.size(); ++i) {
    const auto &a = fused.comm_events[i], &b = unfused.comm_events[i];
    INFO("comm event " << i << ": " << a.op << " on rank " << a.rank);
    CHECK(a.op == b.op);
    CHECK(a.rank == b.rank);
    CHECK(a.start == b.start);
    CHECK(a.dur == b.dur);
    CHECK(a.bytes == b.bytes);
    CHECK(a.sent_bytes == b.sent_bytes);
    CHECK(a.peer == b.peer);
  }
}

TEST_CASE("recv_reduce on phantom tensors moves time only", "[comm][local]") {
  WorldOptions o = local_world(2);
  o.device = DeviceKind::phantom;
  World world(o);
  double end = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::empty({1000}, MemCategory::comm_buffers);
    if (ctx.rank == 0) ctx.comm->send(t, 1);
    if (ctx.rank == 1) {
      ctx.comm->recv_reduce(t, 0);
      end = ctx.clock.compute_now();
    }
  });
  CHECK(end == o.profile.transfer_time(0, 1, 4000));
}

TEST_CASE("recv_reduce from a rank that never sends is reported as a deadlock",
          "[comm][diagnosis]") {
  World world(local_world(2, ClockKind::wall));
  std::string message;
  try {
    world.run([](RankContext& ctx) {
      Tensor acc = Tensor::zeros({4}, MemCategory::workspace);
      if (ctx.rank == 1) ctx.comm->recv_reduce(acc, 0, 7);
    });
  } catch (const RankError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("deadlock"));
  CHECK_THAT(message, Contains("rank 1: waits for recv from rank 0 (tag 7)"));
  CHECK_THAT(message, Contains("rank 0: finished, will never send"));
}

TEST_CASE("recv_reduce of a message of another size names both sizes", "[comm][diagnosis]") {
  World world(local_world(2, ClockKind::wall));
  std::string message;
  try {
    world.run([](RankContext& ctx) {
      if (ctx.rank == 0) ctx.comm->send(Tensor::zeros({8}, MemCategory::workspace), 1);
      if (ctx.rank == 1) {
        Tensor acc = Tensor::zeros({4}, MemCategory::workspace);
        ctx.comm->recv_reduce(acc, 0);
      }
    });
  } catch (const RankError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("received 32 bytes from rank 0") && Contains("holds 16"));
}

}  // namespace test_comm_recv_reduce

// Control data and the all-reduce a communicator runs. Host messages (Comm::send_host /
// recv_host, send_values / recv_values) move u8, i32, i64 and f32 values byte for byte, values
// that a float could not hold included, and the trace says their real byte count; a receive of
// the wrong size is the usual CommError. A World's communicators, split groups included, run the
// all-reduce the World was given, not the installed seam.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/world/world.h"
#include "exercises/exercises.h"

namespace test_comm_host_messages {

using namespace mgpu;

namespace {

WorldOptions two_ranks() {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = 2;
  o.backend = "local";
  o.comm_timeout = 10;
  return o;
}

}  // namespace

TEST_CASE("host messages carry typed values exactly, traced with their real byte count",
          "[comm][host]") {
  const std::vector<uint8_t> text = {'{', '"', 'a', '"', ':', '1', '}'};  // 7 bytes
  const std::vector<int64_t> counters = {(int64_t{1} << 53) + 1, -3};     // no float holds them
  const std::vector<int32_t> ids = {(1 << 24) + 1, 0, 50256};             // 2^24 + 1: nor this
  World world(two_ranks());
  std::vector<uint8_t> got_text;
  std::vector<int64_t> got_counters;
  std::vector<int32_t> got_ids(ids.size());
  world.run([&](RankContext& ctx) {
    comm::Comm& comm = *ctx.comm;
    if (ctx.rank == 0) {
      comm::send_values(comm, text, 1, 7);
      comm::send_values(comm, counters, 1, 7);
      comm.send_host({const_cast<int32_t*>(ids.data()), 3, comm::HostType::i32}, 1, 8);
      return;
    }
    got_text = comm::recv_values<uint8_t>(comm, 0, 7);
    got_counters = comm::recv_values<int64_t>(comm, 0, 7);
    comm.recv_host({got_ids.data(), 3, comm::HostType::i32}, 0, 8);
  });
  CHECK(got_text == text);
  CHECK(got_counters == counters);
  CHECK(got_ids == ids);
  std::vector<int64_t> received;  // rank 1's receives, in order: count, text, count, counters, ids
  for (const trace::Event& e : world.collect_trace().events)
    if (e.rank == 1 && e.op == "recv") received.push_back(e.bytes);
  CHECK(received == std::vector<int64_t>{8, 7, 8, 16, 12});
}

TEST_CASE("a host message of another size than the receive is a CommError naming both",
          "[comm][host]") {
  World world(two_ranks());
  CHECK_THROWS_WITH(world.run([&](RankContext& ctx) {
    int32_t values[4] = {1, 2, 3, 4};
    if (ctx.rank == 0) ctx.comm->send_host({values, 4, comm::HostType::i32}, 1);
    if (ctx.rank == 1) ctx.comm->recv_host({values, 3, comm::HostType::i32}, 0);
  }),
                    Catch::Contains("received 16 bytes from rank 0 (tag 0) in group world, but "
                                    "its buffer holds 12"));
}

TEST_CASE("a world's communicators and their groups run the all-reduce the world was given",
          "[comm][seam]") {
  std::atomic<int> calls{0};
  WorldOptions o = two_ranks();
  o.all_reduce = [&](comm::Comm& c, Tensor& t, comm::ReduceOp op) {
    ++calls;
    reference::ring_all_reduce(c, t, op);
  };
  World world(o);
  std::mutex mutex;
  std::vector<float> sums;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::from({3}, {1.0f, 2.0f, float(ctx.rank)}, MemCategory::comm_buffers);
    ctx.comm->all_reduce(t);
    std::unique_ptr<comm::Comm> group = ctx.comm->split(0, ctx.rank, "g");
    group->all_reduce(t);
    std::lock_guard lock(mutex);
    if (ctx.rank == 0) sums = t.to_vector();
  });
  CHECK(calls == 4);  // two ranks, two all-reduces each
  CHECK(sums == std::vector<float>{4, 8, 2});
}

}  // namespace test_comm_host_messages

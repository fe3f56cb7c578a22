// Graded: exercise 01, ring all-reduce (docs/exercises/01-ring-all-reduce.md).
// The installed all-reduce runs on a real World of rank threads, using the local backend's
// send/recv. The comm timeout is short, so a deadlocking ring fails in seconds with CommError.
#include <catch2/catch.hpp>

#include "common/collective_reference.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "grade/grade_support.h"
#include "grade/ring_diagnosis.h"

using namespace mgpu;
using comm::ReduceOp;

namespace {

std::vector<int64_t> lengths_for(int ranks) {
  return {0, 1, ranks - 1, ranks + 1, 1000};
}

// The installed all-reduce on `ranks` rank threads against a serial reduction. A wrong result
// fails with the first wrong element and each rank's first message off the page's ring (phase,
// step, chunk): grade/ring_diagnosis.h.
void check_all_ranks(int ranks, int64_t n, ReduceOp op) {
  INFO("ranks=" << ranks << " length=" << n << " op=" << comm::reduce_op_name(op));
  const std::string failure =
      grade::ring_all_reduce_failure(ex::selected_seams().comm.all_reduce, ranks, n, op);
  if (!failure.empty()) FAIL(failure);
}

}  // namespace

TEST_CASE("ex01 sum on 2 ranks (2 pts)", "[grade][ex01]") {
  for (int64_t n : lengths_for(2)) check_all_ranks(2, n, ReduceOp::sum);
}

TEST_CASE("ex01 sum on 1..8 ranks with lengths 0 1 N-1 N+1 1000 (4 pts)", "[grade][ex01]") {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (int64_t n : lengths_for(ranks)) check_all_ranks(ranks, n, ReduceOp::sum);
}

TEST_CASE("ex01 avg on 1..8 ranks divides the sum by N (2 pts)", "[grade][ex01]") {
  for (int ranks = 1; ranks <= 8; ++ranks)
    for (int64_t n : lengths_for(ranks)) check_all_ranks(ranks, n, ReduceOp::avg);
}

TEST_CASE("ex01 in place: a view is reduced and its neighbours are untouched (1 pts)",
          "[grade][ex01]") {
  const int ranks = 3;
  const int64_t n = 10;
  World world(grade::local_world(ranks));
  std::vector<std::vector<float>> whole(ranks);
  std::vector<const float*> before(ranks), after(ranks);
  world.run([&](RankContext& ctx) {
    // [100, 100, input..., 100]: only the middle view takes part in the all-reduce.
    std::vector<float> padded(n + 3, 100.0f);
    auto in = testing::rank_input(ctx.rank, n);
    std::copy(in.begin(), in.end(), padded.begin() + 2);
    Tensor buffer = Tensor::from({n + 3}, padded);
    Tensor view = buffer.flat_range(2, 2 + n);
    before[ctx.rank] = view.f32();
    ex::selected_seams().comm.all_reduce(*ctx.comm, view, ReduceOp::sum);
    after[ctx.rank] = view.f32();
    whole[ctx.rank] = buffer.to_vector();
  });
  auto want = testing::serial_reduce(ranks, n, ReduceOp::sum);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    CHECK(after[r] == before[r]);  // the result is written into the caller's tensor
    CHECK(whole[r][0] == 100.0f);
    CHECK(whole[r][1] == 100.0f);
    CHECK(whole[r][n + 2] == 100.0f);
    for (int64_t i = 0; i < n; ++i) REQUIRE(whole[r][i + 2] == Approx(want[i]));
  }
}

TEST_CASE("ex01 bandwidth: each rank sends about 2(N-1)/N of the buffer (1 pts)", "[grade][ex01]") {
  // The ring's point: every rank sends 2(N-1) chunks of n/N elements, whatever N is. A naive
  // all-to-all (send everything to everyone) sends (N-1) n and fails this check.
  const int ranks = 4;
  const int64_t n = 1000;
  World world(grade::local_world(ranks));
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::from({n}, testing::rank_input(ctx.rank, n));
    ex::selected_seams().comm.all_reduce(*ctx.comm, t, ReduceOp::sum);
  });
  trace::Trace trace = world.collect_trace();
  const int64_t ring_bytes = 2 * (ranks - 1) * ((n + ranks - 1) / ranks) * 4;
  for (int r = 0; r < ranks; ++r) {
    int64_t sent = 0;
    for (auto& e : trace.events)
      if (e.rank == r && e.op == "send") sent += e.bytes;
    INFO("rank " << r << " sent " << sent << " bytes; a ring sends at most " << ring_bytes);
    CHECK(sent > 0);
    CHECK(sent <= ring_bytes);
  }
}

// ---- the diagnosis itself (hidden: not graded; test_grade_cli runs them) ----
// Rings with one deliberate bug each, run through the same check as the graded cases: the
// message must name the phase, the step and the chunks, or a valid ring must pass.

namespace {

struct RingBugs {
  int rs_send = 0, rs_add = 0, ag_send = 0, ag_recv = 0;  // added to the page's chunk index
  bool divide = true;                                     // avg divides by N at the end
  bool temporary = false;                                 // recv into a temporary, then add
};

// The page's ring (solutions/ring_all_reduce.cpp), with `bugs`.
comm::AllReduceFn ring_with(RingBugs bugs) {
  return [bugs](comm::Comm& comm, Tensor& t, ReduceOp op) {
    const int n = comm.size(), r = comm.rank();
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    for (int s = 0; s < n - 1; ++s) {
      comm::Work sending = comm.isend(comm::ring_chunk(t, n, r - s - 1 + bugs.rs_send), right);
      Tensor add = comm::ring_chunk(t, n, r - s - 2 + bugs.rs_add);
      if (bugs.temporary) {
        Tensor incoming = Tensor::empty({add.numel()}, MemCategory::comm_buffers);
        comm.recv(incoming, left);
        for (int64_t i = 0; i < add.numel(); ++i) add.f32()[i] += incoming.f32()[i];
      } else {
        comm.recv_reduce(add, left);
      }
      sending.wait();
    }
    for (int s = 0; s < n - 1; ++s) {
      comm::Work sending = comm.isend(comm::ring_chunk(t, n, r - s + bugs.ag_send), right);
      Tensor incoming = comm::ring_chunk(t, n, r - s - 1 + bugs.ag_recv);
      comm.recv(incoming, left);
      sending.wait();
    }
    if (op == ReduceOp::avg && bugs.divide) comm::divide(t, static_cast<float>(n));
  };
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// When the comm layer stops the run, the ranks fail in any order (a rank may be aborted before it
// reaches its own wrong receive): one of them must be named.
bool has_any(const std::string& text, std::initializer_list<std::string> parts) {
  for (auto& part : parts)
    if (has(text, part)) return true;
  return false;
}

}  // namespace

TEST_CASE("ring diagnosis: a valid ring passes, with recv_reduce or a temporary", "[.ring_watch]") {
  for (int ranks : {1, 2, 3, 4})
    for (int64_t n : {0, 1, 5, 1000})
      for (bool temporary : {false, true}) {
        INFO("ranks=" << ranks << " n=" << n << " temporary=" << temporary);
        RingBugs none;
        none.temporary = temporary;
        CHECK(grade::ring_all_reduce_failure(ring_with(none), ranks, n, ReduceOp::avg).empty());
      }
}

TEST_CASE("ring diagnosis: the reduce-scatter adds into the wrong chunk", "[.ring_watch]") {
  RingBugs bugs;
  bugs.rs_add = 1;  // adds into chunk r-s-1, the one it sends
  const std::string wrong = grade::ring_all_reduce_failure(ring_with(bugs), 4, 1000, ReduceOp::sum);
  INFO(wrong);
  CHECK(has(wrong, "rank 0 element "));
  CHECK(has(wrong,
            "rank 0, reduce-scatter step 0: received and added into elements 750..1000 "
            "(chunk 3) from rank 3; the ring adds into chunk r-s-2 = 2 (elements "
            "500..750) from rank 3 at this step"));
  CHECK(has(wrong,
            "rank 1, reduce-scatter step 0: received and added into elements 0..250 "
            "(chunk 0) from rank 0; the ring adds into chunk r-s-2 = 3 (elements "
            "750..1000)"));
  // Uneven chunks: the comm layer stops the run on the size mismatch; the message says where.
  const std::string stopped = grade::ring_all_reduce_failure(ring_with(bugs), 2, 1, ReduceOp::sum);
  INFO(stopped);
  CHECK(has_any(stopped, {"your all-reduce stopped: rank 0: rank 0 received 4 bytes from rank 1",
                          "your all-reduce stopped: rank 1: rank 1 received 0 bytes from rank 0"}));
  CHECK(has_any(stopped, {"(rank 0's receive #1, at reduce-scatter step 0 of the page's ring: "
                          "recv_reduce into elements 1..1 (chunk 1) from rank 1)",
                          "(rank 1's receive #1, at reduce-scatter step 0 of the page's ring: "
                          "recv_reduce into elements 0..1 (chunk 0) from rank 0)"}));
  CHECK(has_any(stopped, {"rank 0, reduce-scatter step 0: received and added into elements 1..1 "
                          "(chunk 1) from rank 1; the ring adds into chunk r-s-2 = 0 (elements "
                          "0..1)",
                          "rank 1, reduce-scatter step 0: received and added into elements 0..1 "
                          "(chunk 0) from rank 0; the ring adds into chunk r-s-2 = 1 (elements "
                          "1..1)"}));
}

TEST_CASE("ring diagnosis: the all-gather sends or receives the wrong chunk", "[.ring_watch]") {
  RingBugs send_bug;
  send_bug.ag_send = -1;  // forwards chunk r-s-1, not the one completed last step
  const std::string sent =
      grade::ring_all_reduce_failure(ring_with(send_bug), 4, 1000, ReduceOp::sum);
  INFO(sent);
  CHECK(has(sent,
            "rank 1, all-gather step 0: sent elements 0..250 (chunk 0) to rank 2; the "
            "ring sends chunk r-s = 1 (elements 250..500) to rank 2 at this step"));
  CHECK_FALSE(has(sent, "reduce-scatter step"));
  RingBugs recv_bug;
  recv_bug.ag_recv = 1;  // receives into chunk r-s
  const std::string received =
      grade::ring_all_reduce_failure(ring_with(recv_bug), 4, 1003, ReduceOp::sum);
  INFO(received);
  CHECK(has(received, "your all-reduce stopped: "));
  CHECK(has_any(received,
                {"rank 0, all-gather step 0: received into elements 0..251 (chunk 0) from rank "
                 "3; the ring receives chunk r-s-1 = 3 (elements 753..1003) from rank 3 at this "
                 "step",
                 "rank 3, all-gather step 0: received into elements 753..1003 (chunk 3) from "
                 "rank 2; the ring receives chunk r-s-1 = 2 (elements 502..753) from rank 2 at "
                 "this step"}));
  CHECK_FALSE(has(received, "reduce-scatter step"));
}

TEST_CASE("ring diagnosis: every message on the ring, the arithmetic wrong", "[.ring_watch]") {
  RingBugs bugs;
  bugs.divide = false;
  const std::string wrong = grade::ring_all_reduce_failure(ring_with(bugs), 3, 10, ReduceOp::avg);
  INFO(wrong);
  CHECK(has(wrong, "rank 0 element 0: got 18 but the mean over the ranks is 6"));
  CHECK(has(wrong, "every message is on the page's ring"));
}

// Hand-computed timelines on the modeled clock: p2p, ring all-reduce, compute/comm overlap, and
// bit-identical traces across runs; the issue board NCCL's ranks time their operations with.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/comm/cost_model.h"
#include "core/comm/issue_board.h"
#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline.h"
#include "core/trace/chrome_trace.h"
#include "core/world/world.h"
#include "mgpu_cli.h"

namespace test_modeled_clock_comm {

using namespace mgpu;

namespace {

// Kernels cost exactly 1 ms; every message costs 1 us + bytes / 1 GB/s.
HardwareProfile test_profile() {
  HardwareProfile p = HardwareProfile::ideal(1e-3);
  p.intra_node = {"test link", 1e9, 1e-6};
  p.inter_node = p.intra_node;
  return p;
}

WorldOptions options_for(int ranks) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.profile = test_profile();
  o.clock = ClockKind::modeled;
  return o;
}

const trace::Event& find(const trace::Trace& t, int rank, const std::string& op) {
  for (const auto& e : t.events)
    if (e.rank == rank && e.op == op) return e;
  FAIL("no " << op << " event on rank " << rank);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("2-rank send/recv: recv ends at max(posted, sent + transfer)", "[clock][comm]") {
  World world(options_for(2));
  world.run([](RankContext& ctx) {
    Tensor t = Tensor::zeros({1000}, MemCategory::workspace);  // 4000 bytes
    if (ctx.rank == 0) {
      { KernelScope k("produce", 0, 0); }  // 1 ms of compute before sending
      ctx.comm->send(t, 1, 0);
    } else {
      ctx.comm->recv(t, 0, 0);  // posted at 0
    }
  });
  const double transfer = test_profile().transfer_time(0, 1, 4000);  // 1e-6 + 4e-6
  auto trace = world.collect_trace();
  const auto& send = find(trace, 0, "send");
  const auto& recv = find(trace, 1, "recv");
  CHECK(send.start == 1e-3);
  CHECK(send.end() == 1e-3 + transfer);
  CHECK(send.peer == 1);
  CHECK(send.bytes == 4000);
  CHECK(recv.start == 0);
  CHECK(recv.end() == 1e-3 + transfer);
  CHECK(world.rank(1).clock.compute_now() == 1e-3 + transfer);
  // The receive was posted 1 ms before its message left: that much of it is waiting.
  CHECK(recv.wait == 1e-3);
  CHECK(send.wait == 0);
}

TEST_CASE("a partner late by a known time: the receive waits exactly that, then the wire time",
          "[clock][comm][wait]") {
  // Rank 1 computes 3 kernels (3 ms) and then sends; rank 0 receives from t = 0 and answers.
  const double late = 3e-3;
  const int64_t bytes = 4000;
  World world(options_for(2));
  world.run([](RankContext& ctx) {
    Tensor t = Tensor::zeros({1000}, MemCategory::workspace);
    if (ctx.rank == 0) {
      ctx.comm->recv(t, 1, 0);
      ctx.comm->send(t, 1, 1);
    } else {
      for (int k = 0; k < 3; ++k) KernelScope kernel("late", 0, 0);
      ctx.comm->send(t, 0, 0);
      ctx.comm->recv(t, 0, 1);
    }
  });
  const double wire = 1e-6 + bytes / 1e9;  // the link's alpha + bytes / bandwidth
  CHECK(test_profile().transfer_time(1, 0, bytes) == wire);
  auto trace = world.collect_trace();
  const auto& waited = find(trace, 0, "recv");
  CHECK(waited.start == 0);
  CHECK(waited.wait == late);
  CHECK(waited.dur - waited.wait == Approx(wire).epsilon(1e-12));
  CHECK(find(trace, 1, "recv").wait == 0);  // rank 0 answered at once: nothing to wait for

  // The analysis splits the rank's comm the same way, and a trace file keeps the split.
  for (const trace::Trace& t : {trace, trace::from_chrome_json(trace::to_chrome_json(trace))}) {
    const trace::RankSummary r0 = trace::analyze(t).ranks.at(0);
    CHECK(r0.comm_wait == Approx(late).epsilon(1e-12));
    CHECK(r0.comm_wire == Approx(2 * wire).epsilon(1e-12));  // its receive's and its answer's
    CHECK(r0.comm == Approx(r0.comm_wire + r0.comm_wait).epsilon(1e-12));
    CHECK(trace::analyze(t).ranks.at(1).comm_wait == 0);
  }
  // The timeline draws the waiting as '~' and names it in the legend.
  trace::AsciiTimelineOptions opt;
  opt.width = 80;
  opt.colour = false;
  const std::string drawn = trace::render_ascii_timeline(trace, opt);
  CHECK_THAT(drawn, Catch::Contains("~~~~~"));
  CHECK_THAT(drawn, Catch::Contains("~ waiting for a partner"));
}

TEST_CASE("on the wall clock, threads measure a receive's wait the same way",
          "[clock][comm][wait]") {
  // Rank 1 answers rank 0's "go" only after 50 ms of (host) work: rank 0's receive, posted right
  // after its "go", blocks about that long before rank 1 hands over the data.
  WorldOptions o = options_for(2);
  o.clock = ClockKind::wall;
  World world(o);
  world.run([](RankContext& ctx) {
    Tensor go = Tensor::zeros({1}, MemCategory::workspace);
    Tensor answer = Tensor::zeros({1000}, MemCategory::workspace);
    if (ctx.rank == 0) {
      ctx.comm->send(go, 1, 0);
      ctx.comm->recv(answer, 1, 1);
    } else {
      ctx.comm->recv(go, 0, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the late partner's work
      ctx.comm->send(answer, 0, 1);
    }
  });
  auto trace = world.collect_trace();
  const trace::Event* answer = nullptr;
  for (const auto& e : trace.events)
    if (e.rank == 0 && e.op == "recv") answer = &e;
  REQUIRE(answer);
  INFO("recv " << answer->dur << " s, of which waiting " << answer->wait << " s");
  CHECK(answer->wait > 0.025);  // most of the 50 ms (rank 0 may start its receive a little late)
  CHECK(answer->wait <= answer->dur);
}

TEST_CASE("a late member's all-reduce: the others wait, its own ring steps stay on the wire",
          "[clock][comm][wait]") {
  // 2 ranks, one ring step each way: on time it costs 2 steps of `step`. Rank 1 is 1 ms late, so
  // rank 0 sends its half, waits for rank 1's (late - step, the part of the delay not covered by
  // its own send), receives it (step) and forwards the sum (step).
  const int64_t n = 4096;
  const double late = 1e-3, step = 1e-6 + (n / 2) * 4 / 1e9;
  World world(options_for(2));
  world.run([&](RankContext& ctx) {
    if (ctx.rank == 1) KernelScope kernel("late", 0, 0);
    Tensor t = Tensor::zeros({n}, MemCategory::gradients);
    ctx.comm->all_reduce(t);
  });
  auto trace = world.collect_trace();
  const auto& on_time = find(trace, 0, "all_reduce");
  CHECK(on_time.dur == Approx(late + 2 * step).epsilon(1e-12));
  CHECK(on_time.wait == Approx(late - step).epsilon(1e-12));
  const auto& latecomer = find(trace, 1, "all_reduce");
  CHECK(latecomer.start == late);
  CHECK(latecomer.wait == 0);
  CHECK(latecomer.dur == Approx(2 * step).epsilon(1e-12));
}

TEST_CASE("4-rank ring all-reduce costs 2(N-1)(alpha + (n/N)*4/bw)", "[clock][comm]") {
  const int N = 4;
  const int64_t n = 4096;
  World world(options_for(N));
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::gradients);
    ctx.comm->all_reduce(t);
  });
  const double step = 1e-6 + (n / N) * 4 / 1e9;
  auto trace = world.collect_trace();
  REQUIRE(trace.events.size() == N);  // inner messages are not traced one by one
  for (int r = 0; r < N; ++r) {
    const auto& e = find(trace, r, "all_reduce");
    CHECK(e.start == 0);
    CHECK(e.dur == Approx(2 * (N - 1) * step).epsilon(1e-12));
    CHECK(e.seq == 0);
    CHECK(e.group == "world");
    CHECK(e.bytes == n * 4);
    CHECK(e.lane == trace::Lane::comm);
  }
}

TEST_CASE("all_to_all costs (N-1)(alpha + (n/N)*4/bw), emerging from its messages",
          "[clock][comm][all_to_all]") {
  for (int N : {2, 3, 4, 8}) {
    INFO("ranks=" << N);
    const int64_t n = 1200 * N;  // elements each rank holds: N blocks of 1200
    World world(options_for(N));
    world.run([&](RankContext& ctx) {
      Tensor in = Tensor::zeros({n}, MemCategory::activations);
      Tensor out = Tensor::zeros({n}, MemCategory::activations);
      ctx.comm->all_to_all(in, out);
    });
    const double by_hand = (N - 1) * (1e-6 + (n / N) * 4 / 1e9);
    const double model = comm::alpha_beta_time("all_to_all", n, 4, N, test_profile());
    CHECK(model == Approx(by_hand).epsilon(1e-12));
    auto trace = world.collect_trace();
    REQUIRE(trace.events.size() == static_cast<size_t>(N));  // inner messages are not traced
    for (int r = 0; r < N; ++r) {
      const auto& e = find(trace, r, "all_to_all");
      CHECK(e.start == 0);
      CHECK(e.dur == Approx(model).epsilon(1e-12));
      CHECK(world.rank(r).clock.compute_now() == Approx(model).epsilon(1e-12));
    }
  }
}

TEST_CASE("all_reduce_async overlaps compute: step end = max of the lanes, not the sum",
          "[clock][comm]") {
  const int N = 2;
  // One bucket: 2(N-1) = 2 messages of n/2 floats. Pick n so the all-reduce takes 3.5 ms.
  const double comm_seconds = 3.5e-3;
  const int64_t n = static_cast<int64_t>((comm_seconds / 2 - 1e-6) * 1e9 / 4 * 2);
  for (int kernels : {2, 6}) {
    World world(options_for(N));
    world.run([&](RankContext& ctx) {
      StepScope step(0);
      Tensor grads = Tensor::zeros({n}, MemCategory::gradients);
      comm::Work work = ctx.comm->all_reduce_async(grads);
      for (int k = 0; k < kernels; ++k) KernelScope kernel("backward", 0, 0);
      work.wait();
    });
    double comm_end = 2 * (1e-6 + (n / 2) * 4 / 1e9);
    double compute_end = kernels * 1e-3;
    auto trace = world.collect_trace();
    auto step_it = std::find_if(trace.events.begin(), trace.events.end(),
                                [](const auto& e) { return e.cat == trace::cat::step; });
    REQUIRE(step_it != trace.events.end());
    const auto& step = *step_it;
    CHECK(step.dur == Approx(std::max(comm_end, compute_end)).epsilon(1e-12));
    CHECK(world.rank(0).clock.compute_now() ==
          Approx(std::max(comm_end, compute_end)).epsilon(1e-12));
  }
}

TEST_CASE("a blocking collective waits for its last member", "[clock][comm]") {
  World world(options_for(2));
  world.run([](RankContext& ctx) {
    if (ctx.rank == 1)
      for (int k = 0; k < 3; ++k) KernelScope kernel("late", 0, 0);  // arrives at 3 ms
    ctx.comm->barrier();
  });
  const double alpha = 1e-6;
  CHECK(world.rank(0).clock.compute_now() == Approx(3e-3 + alpha).epsilon(1e-12));
  CHECK(world.rank(1).clock.compute_now() == Approx(3e-3 + alpha).epsilon(1e-12));
}

TEST_CASE("identical runs give bit-identical traces", "[clock][comm][determinism]") {
  auto program = [](RankContext& ctx) {
    auto half = ctx.comm->split(ctx.rank / 3, ctx.rank, "half" + std::to_string(ctx.rank / 3));
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k <= ctx.rank % 3; ++k) KernelScope kernel("work", 0, 0);
      Tensor t = Tensor::from({100 + i}, std::vector<float>(100 + i, 1.0f));
      comm::Work w = ctx.comm->all_reduce_async(t);
      half->all_reduce(t, comm::ReduceOp::avg);
      w.wait();
      Tensor b = Tensor::zeros({33}, MemCategory::workspace);
      ctx.comm->broadcast(b, i % ctx.world_size);
      if (ctx.rank % 2 == 0 && ctx.rank + 1 < ctx.world_size) ctx.comm->send(b, ctx.rank + 1, i);
      if (ctx.rank % 2 == 1) ctx.comm->recv(b, ctx.rank - 1, i);
      Tensor out = Tensor::zeros({comm::chunk_range(1000, ctx.world_size, ctx.rank).second -
                                  comm::chunk_range(1000, ctx.world_size, ctx.rank).first},
                                 MemCategory::workspace);
      ctx.comm->reduce_scatter(Tensor::zeros({1000}, MemCategory::workspace), out);
    }
  };
  std::vector<trace::Event> first, second;
  for (auto* events : {&first, &second}) {
    WorldOptions o = options_for(7);
    o.profile = HardwareProfile::load("8xH100-NVLink");
    World world(o);
    world.run(program);
    *events = world.collect_trace().events;
  }
  REQUIRE(first.size() > 7 * 12);
  CHECK(first == second);
}

TEST_CASE("collect_trace fills metadata and orders events by rank, then start", "[world]") {
  World world(options_for(3));
  world.run([](RankContext& ctx) {
    for (int k = 0; k < 2; ++k) KernelScope kernel("k", 0, 0);
    ctx.comm->barrier();
  });
  auto trace = world.collect_trace({{"lesson", "test"}});
  CHECK(trace.num_ranks == 3);
  CHECK(trace.metadata["num_ranks"] == 3);
  CHECK(trace.metadata["clock"] == "modeled");
  CHECK(trace.metadata["lesson"] == "test");
  CHECK(trace.metadata.contains("profile"));
  for (size_t i = 1; i < trace.events.size(); ++i) {
    const auto& a = trace.events[i - 1];
    const auto& b = trace.events[i];
    CHECK(std::tie(a.rank, a.start) <= std::tie(b.rank, b.start));
  }
}

TEST_CASE("model_parallel's comm was mostly waiting for the next stage: now it says so",
          "[clock][comm][wait][lesson]") {
  // Stage 0 posts the receive of its backward gradient right after its forward, then waits for
  // the other three stages' forwards and backwards: its link is free almost all that time.
  const std::string path = mgpu::testing::temp_path("model_parallel_wait.json");
  auto r = mgpu::testing::run_mgpu(
      mgpu::testing::with_tiny_model({"run", "model_parallel", "--theory", "--trace", path}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("comm wire   comm wait"));
  const trace::Trace t = trace::read_chrome_trace(path);
  const trace::RankSummary r0 = trace::analyze(t, 1).ranks.at(0);
  INFO("comm " << r0.comm << " s, wire " << r0.comm_wire << " s, wait " << r0.comm_wait << " s");
  // Theory mode's links are free: every moment of stage 0's comm is waiting for a partner.
  CHECK(r0.comm > 0.008);
  CHECK(r0.comm_wire == 0.0);
  CHECK(r0.comm_wait == r0.comm);
  std::filesystem::remove(path);
}

TEST_CASE("issue board: members meet on a collective's issue times, a receive takes its send's",
          "[clock][comm]") {
  using Catch::Matchers::Contains;
  auto board = comm::IssueBoard::of_group("test group");
  CHECK(comm::IssueBoard::of_group("test group") == board);  // every member finds the same one
  CHECK(comm::IssueBoard::of_group("another group") != board);
  std::vector<std::vector<double>> seen(3);
  {
    std::vector<std::jthread> members;
    for (int r = 0; r < 3; ++r)
      members.emplace_back([&, r] {
        seen[r] = board->collective_starts(0, r, 3, 1.0 + r, 10, "all_reduce #0 of group test");
      });
  }
  for (const auto& starts : seen) CHECK(starts == std::vector<double>{1.0, 2.0, 3.0});

  board->post_send(0, 1, 0, 0.5);
  board->post_send(0, 1, 1, 0.7);
  CHECK(board->take_send(0, 1, 1, 10, "message #1") == 0.7);  // whichever is waited for first
  CHECK(board->take_send(0, 1, 0, 10, "message #0") == 0.5);

  // A member that never comes is a CommError naming it, not a hang.
  CHECK_THROWS_WITH(board->collective_starts(1, 0, 2, 0.0, 0.05, "barrier #1 of group test"),
                    Contains("group rank(s) 1") && Contains("barrier #1 of group test"));
  CHECK_THROWS_WITH(board->take_send(1, 0, 0, 0.05, "message #0"),
                    Contains("rank 1 to send message #0"));
}

}  // namespace test_modeled_clock_comm

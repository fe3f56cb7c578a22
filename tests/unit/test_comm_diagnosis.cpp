// Planted communication mistakes must become clear errors naming the right ranks, quickly,
// instead of hangs: deadlocks, mismatched collectives, early exits, timeouts, failing ranks.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/world/world.h"

namespace test_comm_diagnosis {

using namespace mgpu;

namespace {

WorldOptions options_for(int ranks, double timeout = 20) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = timeout;
  return o;
}

// Runs fn on a world, expects a RankError, returns its message and how long it took.
std::string expect_failure(World& world, const std::function<void(RankContext&)>& fn,
                           double* seconds = nullptr, int* failed_rank = nullptr) {
  auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    world.run(fn);
    FAIL("expected the run to fail");
  } catch (const RankError& e) {
    message = e.what();
    if (failed_rank) *failed_rank = e.rank();
  }
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return message;
}

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("recv without a send is reported as a deadlock at once", "[comm][diagnosis]") {
  World world(options_for(2));
  double seconds = 0;
  std::string msg = expect_failure(
      world,
      [](RankContext& ctx) {
        if (ctx.rank == 1) {
          Tensor t = Tensor::empty({4}, MemCategory::workspace);
          ctx.comm->recv(t, 0, 7);
        }
      },
      &seconds);
  CHECK_THAT(msg, Contains("deadlock"));
  CHECK_THAT(msg, Contains("rank 1: waits for recv from rank 0 (tag 7)"));
  CHECK_THAT(msg, Contains("rank 0: finished, will never send"));
  CHECK(seconds < 5);  // far below the 20 s timeout: detected, not timed out
}

TEST_CASE("two ranks receiving from each other first: every rank gets the CommError",
          "[comm][diagnosis]") {
  World world(options_for(3));
  std::atomic<int> comm_errors{0};
  std::string msg = expect_failure(world, [&](RankContext& ctx) {
    Tensor t = Tensor::empty({4}, MemCategory::workspace);
    try {
      ctx.comm->recv(t, (ctx.rank + 1) % 3);
    } catch (const comm::CommError&) {
      ++comm_errors;
      throw;
    }
  });
  CHECK(comm_errors == 3);
  CHECK_THAT(msg, Contains("rank 0: waits for recv from rank 1"));
  CHECK_THAT(msg, Contains("rank 1: waits for recv from rank 2"));
  CHECK_THAT(msg, Contains("rank 2: waits for recv from rank 0"));
}

TEST_CASE("a rank that exits early leaves the others in a collective: deadlock names it",
          "[comm][diagnosis]") {
  World world(options_for(3));
  std::string msg = expect_failure(world, [](RankContext& ctx) {
    if (ctx.rank == 2) return;
    Tensor t = Tensor::from({6}, {1, 2, 3, 4, 5, 6});
    ctx.comm->all_reduce(t);
  });
  CHECK_THAT(msg, Contains("deadlock"));
  CHECK_THAT(msg, Contains("rank 2: finished, will never send"));
  CHECK_THAT(msg, Contains("waits in all_reduce #0 of group world"));
}

TEST_CASE("mismatched collective kinds name each rank's call", "[comm][diagnosis]") {
  World world(options_for(2));
  std::atomic<int> comm_errors{0};
  std::string msg = expect_failure(world, [&](RankContext& ctx) {
    try {
      Tensor small = Tensor::from({2}, {1, 2});
      ctx.comm->all_reduce(small);  // collective #0 matches
      if (ctx.rank == 0) {
        Tensor t = Tensor::empty({1024}, MemCategory::workspace);
        ctx.comm->all_reduce(t);
      } else {
        Tensor in = Tensor::empty({128}, MemCategory::workspace);
        Tensor out = Tensor::empty({256}, MemCategory::workspace);
        ctx.comm->all_gather(in, out);
      }
    } catch (const comm::CommError&) {
      ++comm_errors;
      throw;
    }
  });
  CHECK(comm_errors == 2);
  CHECK_THAT(msg, Contains("collective #1 in group world does not match"));
  CHECK_THAT(msg, Contains("rank 0 called all_reduce(count=1024, f32, sum)"));
  CHECK_THAT(msg, Contains("rank 1 called all_gather(count=256, f32)"));
}

TEST_CASE("mismatched counts are reported", "[comm][diagnosis]") {
  World world(options_for(4));
  std::string msg = expect_failure(world, [](RankContext& ctx) {
    Tensor t = Tensor::empty({ctx.rank == 3 ? 10 : 12}, MemCategory::workspace);
    ctx.comm->all_reduce(t, comm::ReduceOp::avg);
  });
  CHECK_THAT(msg, Contains("does not match"));
  CHECK_THAT(msg, Contains("called all_reduce(count=12, f32, avg)"));
  CHECK_THAT(msg, Contains("rank 3 called all_reduce(count=10, f32, avg)"));
}

TEST_CASE("a rank skipping a collective is caught at its next one", "[comm][diagnosis]") {
  World world(options_for(3));
  std::string msg = expect_failure(world, [](RankContext& ctx) {
    Tensor t = Tensor::from({3}, {1, 2, 3});
    if (ctx.rank != 1) ctx.comm->all_reduce(t);
    ctx.comm->barrier();
  });
  CHECK_THAT(msg, Contains("collective #0 in group world does not match"));
  CHECK_THAT(msg, Contains("rank 1 called barrier()"));
  // Ranks 0 and 2 both called all_reduce; the message names whichever got there first.
  CHECK_THAT(msg, Contains("rank 0 called all_reduce(count=3, f32, sum)") ||
                      Contains("rank 2 called all_reduce(count=3, f32, sum)"));
}

TEST_CASE("a wait longer than comm_timeout is reported with the table", "[comm][diagnosis]") {
  World world(options_for(2, 0.2));
  std::mutex m;
  std::condition_variable cv;
  bool rank1_done = false;
  double seconds = 0;
  std::string msg = expect_failure(
      world,
      [&](RankContext& ctx) {
        if (ctx.rank == 0) {  // "busy" (not blocked in comm) until rank 1 has given up
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return rank1_done; });
          return;
        }
        struct Done {
          std::mutex& m;
          std::condition_variable& cv;
          bool& done;
          ~Done() {
            std::lock_guard lock(m);
            done = true;
            cv.notify_all();
          }
        } done{m, cv, rank1_done};
        Tensor t = Tensor::empty({4}, MemCategory::workspace);
        ctx.comm->recv(t, 0, 2);
      },
      &seconds);
  CHECK_THAT(msg, Contains("timeout: rank 1 waited more than 0.2 s"));
  CHECK_THAT(msg, Contains("rank 1: waits for recv from rank 0 (tag 2)"));
  CHECK_THAT(msg, Contains("rank 0: running"));
  CHECK(seconds < 5);
}

TEST_CASE("an exception on one rank stops the others and is reported as RankError",
          "[comm][diagnosis][world]") {
  World world(options_for(4));
  int failed = -1;
  std::string msg = expect_failure(
      world,
      [](RankContext& ctx) {
        if (ctx.rank == 2) throw std::runtime_error("boom in the loss");
        Tensor t = Tensor::from({8}, std::vector<float>(8, 1.0f));
        ctx.comm->all_reduce(t);  // blocks: rank 2 never joins
      },
      nullptr, &failed);
  CHECK(failed == 2);
  CHECK_THAT(msg, Contains("rank 2: boom in the loss"));
  CHECK_THAT(msg, !Contains("aborted"));

  // The world is usable again after a failed run.
  std::vector<float> ok(4);
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::from({1}, {1.0f});
    ctx.comm->all_reduce(t);
    ok[ctx.rank] = t.to_vector()[0];
  });
  CHECK(ok == std::vector<float>(4, 4.0f));
}

TEST_CASE("World validates its options", "[world]") {
  WorldOptions o = options_for(65);
  CHECK_THROWS_AS(World(o), std::invalid_argument);
  o.ranks = 2;
  o.backend = "carrier-pigeon";
  CHECK_THROWS_AS(World(o), std::invalid_argument);
}

TEST_CASE("a receive of a message of another size names both sizes, blocking or not",
          "[comm][diagnosis]") {
  // (sent, posted) floats: a larger message must not overrun the buffer, a smaller one must not
  // leave its tail stale in silence.
  for (auto [sent, posted] : {std::pair<int64_t, int64_t>{8, 4}, {4, 8}})
    for (bool nonblocking : {false, true}) {
      CAPTURE(sent, posted, nonblocking);
      World world(options_for(2));
      int failed_rank = -1;
      std::string msg = expect_failure(
          world,
          [&, sent = sent, posted = posted](RankContext& ctx) {
            if (ctx.rank == 0) ctx.comm->send(Tensor::zeros({sent}, MemCategory::workspace), 1, 3);
            if (ctx.rank != 1) return;
            Tensor t = Tensor::zeros({posted}, MemCategory::workspace);
            if (nonblocking)
              ctx.comm->irecv(t, 0, 3).wait();
            else
              ctx.comm->recv(t, 0, 3);
          },
          nullptr, &failed_rank);
      CHECK(failed_rank == 1);
      CHECK_THAT(msg, Contains(fmt::format("rank 1 received {} bytes from rank 0 (tag 3) in group "
                                           "world, but its buffer holds {}",
                                           4 * sent, 4 * posted)));
    }
}

TEST_CASE("processes started with different options: a table of who differs in what",
          "[world][diagnosis]") {
  const RunConfig same = {{"lesson", "pipeline"}, {"--steps", "20"}, {"--microbatches", "8"}};
  RunConfig fewer = same;
  fewer[2].second = "4";
  const std::string table = describe_run_config_disagreement({same, same, fewer, fewer});
  CAPTURE(table);
  CHECK_THAT(table,
             Contains("the 4 processes of this MPI job were started with different options"));
  CHECK_THAT(table, Contains("(2 ranks differ from rank 0)"));
  CHECK_THAT(table, Contains("\n  option          rank 0  rank 2  rank 3\n"));
  CHECK_THAT(table, Contains("\n  --microbatches  8       4       4"));
  CHECK_THAT(table, !Contains("--steps"));  // only the options that differ are rows
  // Another lesson (an option one side lacks), and many ranks: the columns are capped.
  RunConfig other = {{"lesson", "ddp"}, {"--steps", "20"}};
  std::vector<RunConfig> many(12, other);
  many[0] = same;
  const std::string wide = describe_run_config_disagreement(many);
  CAPTURE(wide);
  CHECK_THAT(wide, Contains("(11 ranks differ from rank 0)"));
  CHECK_THAT(wide, Contains("  lesson          pipeline  ddp"));
  CHECK_THAT(wide, Contains("  --microbatches  8         (none)"));
  CHECK_THAT(wide, Contains("rank 7\n"));
  CHECK_THAT(wide, Contains("(and 4 more ranks that differ)"));
}

}  // namespace test_comm_diagnosis

// Data parallelism: naive DataParallel, DDP (overlap on/off, several bucket sizes) and gradient
// accumulation all train to the single-device parameters; a rank that trains on the wrong shard
// is caught; the modeled clock's overlap and bytes match the theory exactly.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/parallel/ddp_seams.h"
#include "core/trace/analysis.h"
#include "exercises/exercises.h"
#include "lessons/ddp.h"

namespace test_ddp {

using namespace mgpu;
using namespace mgpu::lessons;

namespace {
CommonOptions tiny(int ranks, int batch = 12) {
  CommonOptions c;
  c.ranks = ranks;
  c.steps = 3;
  c.batch = batch;  // 12 divides over 1, 2, 3 and 4 ranks
  c.seq = 8;
  c.dim = 16;
  c.heads = 2;
  c.layers = 2;
  c.quiet = true;
  return c;
}

DataParallelResult train_lesson(const CommonOptions& c, DataParallelOptions d) {
  std::ostringstream out;
  return train_data_parallel(c, d, out);
}

// Tolerance: every variant computes the same global-batch mean gradient, but sums it in a
// different order (per shard, then across ranks by the ring; or per micro-batch), so fp32 results
// differ by rounding only: ~1e-7 relative per step. After 3 steps the parameters (|p| <~ 1) agree
// to 2e-6 with SGD; AdamW divides by sqrt(v), which amplifies rounding in tiny gradients, so 2e-5.
constexpr float kSgdTolerance = 2e-6f;
constexpr float kAdamTolerance = 2e-5f;
}  // namespace

TEST_CASE("every data-parallel variant reproduces the single-device parameters",
          "[ddp][equivalence]") {
  for (std::string optimizer : {"sgd", "adamw"}) {
    const float tolerance = optimizer == "sgd" ? kSgdTolerance : kAdamTolerance;
    for (int ranks : {1, 2, 3, 4}) {
      CommonOptions c = tiny(ranks);
      c.optimizer = optimizer;
      c.lr = optimizer == "sgd" ? 0.1 : 3e-3;
      auto reference = train_single_device_params(c, c.batch);
      struct Variant {
        std::string name;
        DataParallelOptions d;
      };
      std::vector<Variant> variants = {
          {"naive DataParallel", {.naive = true}},
          {"DDP overlap off", {.overlap = false}},
          {"DDP tiny buckets (500 B)", {.bucket_mb = "0.0005"}},
          {"DDP 4 KB buckets", {.bucket_mb = "0.004"}},
          {"DDP auto buckets", {}},
          {"DDP one bucket", {.bucket_mb = "100"}},
      };
      for (const auto& v : variants) {
        INFO(optimizer << ", " << ranks << " ranks, " << v.name);
        DataParallelResult r = train_lesson(c, v.d);
        CHECK(r.losses.size() == 3);
        CHECK(max_param_difference(r.params, reference) <= tolerance);
      }
      // Accumulation: 2 micro-steps per rank over a global batch of 24 (divides 1..4 ranks x 2).
      CommonOptions big = tiny(ranks, 24);
      big.optimizer = c.optimizer;
      big.lr = c.lr;
      for (bool overlap : {true, false}) {
        INFO(optimizer << ", " << ranks << " ranks, accumulation k=2, overlap " << overlap);
        DataParallelResult r = train_lesson(big, {.overlap = overlap, .accum = 2});
        CHECK(max_param_difference(r.params, train_single_device_params(big, 24)) <= tolerance);
      }
    }
  }
}

TEST_CASE("buckets follow the --bucket-mb cap and hold every gradient once", "[ddp]") {
  CommonOptions c = tiny(2);
  CHECK(train_lesson(c, {.bucket_mb = "100"}).buckets == 1);
  DataParallelResult small = train_lesson(c, {.bucket_mb = "0.0005"});
  DataParallelResult autob = train_lesson(c, {});
  CHECK(autob.bucket_bytes == (autob.gradient_bytes + 3) / 4);
  CHECK(autob.buckets >= 4);
  CHECK(small.buckets > autob.buckets);
}

TEST_CASE("each rank trains on its own shard; a planted 'everyone uses shard 0' bug is caught",
          "[ddp][sampler]") {
  CommonOptions c = tiny(2);
  auto reference = train_single_device_params(c, c.batch);
  DataParallelResult good = train_lesson(c, {});
  CHECK(good.shard_problem.empty());
  CHECK(max_param_difference(good.params, reference) <= kAdamTolerance);

  DataParallelResult planted = train_lesson(c, {.planted_same_shard = true});
  CHECK_FALSE(planted.shard_problem.empty());  // check_shards_partition names the problem
  CHECK(max_param_difference(planted.params, reference) > 1e-3f);
}

TEST_CASE("modeled clock: overlap shortens the step by exactly the hidden comm; bytes = formula",
          "[ddp][clock]") {
  // A slow link so communication is large next to compute, and a wider model so there is some.
  CommonOptions c = tiny(4, 16);
  c.dim = 32;
  c.profile = "2xRTX4090-PCIe";
  DataParallelResult on = train_lesson(c, {.overlap = true, .bucket_mb = "0.004"});
  DataParallelResult off = train_lesson(c, {.overlap = false});
  trace::TraceSummary s_on = trace::analyze(on.trace, c.steps - 1);
  trace::TraceSummary s_off = trace::analyze(off.trace, c.steps - 1);
  for (int r = 0; r < c.ranks; ++r) {
    INFO("rank " << r);
    const auto& a = s_on.ranks[r];
    const auto& b = s_off.ranks[r];
    // Bytes: each rank all-reduces its whole gradient once per step (4 B x params), in buckets or
    // tensor by tensor; the ring then sends 2(N-1)/N of that per rank.
    CHECK(a.bytes_sent == on.gradient_bytes);
    CHECK(b.bytes_sent == off.gradient_bytes);
    // Same kernels either way, so the same compute time.
    CHECK(a.busy == Approx(b.busy).epsilon(1e-12));
    // The compute lane only ever idles waiting for gradients, so the step is compute plus the
    // comm that was NOT hidden: span = busy + (comm - overlap). Without overlap nothing hides.
    CHECK(b.overlap == 0);
    CHECK(b.span == Approx(b.busy + b.comm).epsilon(1e-9));
    CHECK(a.span == Approx(a.busy + a.exposed_comm).epsilon(1e-9));
    CHECK(a.overlap > 0);
    // Hence the saving is the hidden comm plus whatever the buckets saved in comm time itself
    // (fewer, larger messages pay fewer latencies than one all-reduce per tensor).
    CHECK(b.span - a.span == Approx((b.comm - a.comm) + a.overlap).epsilon(1e-9));
    CHECK(a.span < b.span);
  }
}

TEST_CASE("bucket seam: packs gradients in backward order; an oversized one gets its own bucket",
          "[ddp][seam]") {
  const parallel::DdpSeams& seams = reference::seams().ddp;
  parallel::BucketPlan plan = seams.assign_buckets({100, 100, 300, 50, 50, 150}, 200);
  CHECK(plan.buckets == std::vector<std::vector<int>>{{0, 1}, {2}, {3, 4}, {5}});
  CHECK(seams.assign_buckets({}, 10).buckets.empty());
  CHECK_THROWS_AS(seams.assign_buckets({4}, 0), std::invalid_argument);
  std::vector<bool> final_grads = {true, true, false, false, false, false};
  CHECK(seams.bucket_ready(plan, 0, final_grads));
  CHECK_FALSE(seams.bucket_ready(plan, 1, final_grads));
}

TEST_CASE("naive DataParallel: the driver works while the replicas idle, and DDP is faster",
          "[ddp][data_parallel]") {
  CommonOptions c = tiny(4);
  DataParallelResult naive = train_lesson(c, {.naive = true});
  DataParallelResult ddp = train_lesson(c, {});
  trace::TraceSummary s = trace::analyze(naive.trace, c.steps - 1);
  for (int r = 1; r < c.ranks; ++r) {
    CHECK(s.ranks[0].busy > 2 * s.ranks[r].busy);  // summing gradients + the only optimizer
    CHECK(s.ranks[r].bubble_fraction > 0.5);
  }
  CHECK(naive.step_seconds > ddp.step_seconds);
}

}  // namespace test_ddp

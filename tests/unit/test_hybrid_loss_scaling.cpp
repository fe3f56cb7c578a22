// fp16 in hybrid DP x TP x PP: an overflow in one rank's gradients (one tp slice of one stage of
// one replica, or, under ZeRO-1, one dp chunk) must make all 8 ranks skip that step together,
// because the found-inf flag is all-reduced over the dp, pp and tp groups.
#include <catch2/catch.hpp>

#include <mutex>

#include "core/optim/mixed_precision.h"
#include "core/parallel/hybrid.h"
#include "core/runtime/world.h"
#include "core/train/trainer.h"

using namespace mgpu;

namespace {

// What each rank saw, stored by the rank threads and asserted on the main thread.
struct RankScaling {
  int64_t skipped = -1;
  float scale = 0;
  int64_t optimizer_steps = -1;
};

struct ScaledRun {
  train::TrainResult result;
  std::vector<RankScaling> ranks;
};

ScaledRun train_hybrid_fp16(int zero, std::vector<std::pair<int, int>> inject) {
  GPTConfig cfg;
  cfg.layers = 4;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.seq_len = 8;
  cfg.vocab = data::make_task("markov", 1, {.seq_len = 8})->vocab_size();
  cfg.dtype = DType::f16;
  parallel::HybridOptions options{.schedule = "1f1b", .microbatches = 2, .zero = zero};
  options.mesh.tp = 2;
  options.mesh.dp = 2;
  options.mesh.pp = 2;
  train::TrainOptions t;
  t.steps = 4;
  t.global_batch = 8;
  t.seq = 8;
  t.loss_scaling = train::LossScaling{.inject_overflow = std::move(inject)};

  WorldOptions o;
  o.ranks = 8;
  o.backend = "local";
  o.comm_timeout = 20;
  World world(o);
  auto task = data::make_task("markov", 1, {.seq_len = 8});
  ScaledRun run;
  run.ranks.resize(8);
  std::mutex mutex;
  run.result = train::train(
      world, *task, t,
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        return std::make_unique<parallel::HybridLayout>(
            cfg, *ctx.comm, options, [](const ParamList& params) {
              return optim::make_adamw(optim::whole_params(params), DType::f16);
            });
      },
      {},
      [&](RankContext& ctx, train::Layout& layout) {
        std::lock_guard lock(mutex);
        RankScaling& r = run.ranks[static_cast<size_t>(ctx.rank)];
        if (const optim::LossScaler* s = layout.loss_scaler())
          r = {s->skipped_steps(), s->scale(), -1};
        if (optim::Optimizer* opt = layout.optimizer()) r.optimizer_steps = opt->step_count();
      });
  return run;
}

}  // namespace

TEST_CASE("hybrid fp16: an overflow on one rank makes all 8 ranks skip that step",
          "[hybrid][loss_scaler][train]") {
  for (int zero : {0, 1}) {
    // rank 5 = dp0 pp1 tp1: the last stage's second tp slice, in the first replica
    INFO("--zero " << zero);
    ScaledRun run = train_hybrid_fp16(zero, {{2, 5}});
    CHECK(run.result.skipped_steps == std::vector<int>{2});
    CHECK(run.result.loss_scale == 32768.0f);
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      CAPTURE(r);
      CHECK(run.ranks[r].skipped == 1);
      CHECK(run.ranks[r].scale == 32768.0f);
      CHECK(run.ranks[r].optimizer_steps == 3);  // 4 steps, one skipped
    }
    ScaledRun clean = train_hybrid_fp16(zero, {});
    CHECK(clean.result.skipped_steps.empty());
    CHECK(clean.result.loss_scale == 65536.0f);
  }
}

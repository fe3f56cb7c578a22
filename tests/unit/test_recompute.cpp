// Activation checkpointing: selective and full recompute give bit-identical parameters to none,
// keep less activation memory, and show their extra forward as "recompute" trace events; also
// inside 1F1B pipeline stages.
#include <catch2/catch.hpp>

#include <map>
#include <mutex>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/parallel/pipeline/executor.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/runtime/world.h"
#include "lessons/precision_training.h"

using namespace mgpu;

namespace {
lessons::PrecisionRun run_with(Recompute mode, DType dtype) {
  lessons::PrecisionRunOptions o;
  o.model.seq_len = 32;
  o.model.layers = 2;
  o.model.dtype = dtype;
  o.model.recompute = mode;
  o.steps = 3;
  o.batch = 4;
  o.profile = HardwareProfile::load("8xH100-NVLink");
  auto task = data::make_task("markov", 7, {.seq_len = 32});
  o.model.vocab = task->vocab_size();
  return lessons::train_precision_run(o, *task);
}
int64_t activations_peak(const lessons::PrecisionRun& r) {
  return r.memory.peak[int(MemCategory::activations)];
}
}  // namespace

TEST_CASE("recompute selective/full: bit-identical parameters, lower activation peak",
          "[recompute]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    DYNAMIC_SECTION(precision_name(dtype)) {
      lessons::PrecisionRun none = run_with(Recompute::none, dtype);
      lessons::PrecisionRun selective = run_with(Recompute::selective, dtype);
      lessons::PrecisionRun full = run_with(Recompute::full, dtype);
      REQUIRE(!none.final_params.empty());
      CHECK(selective.final_params == none.final_params);  // bit for bit
      CHECK(full.final_params == none.final_params);
      CHECK(selective.losses == none.losses);
      CHECK(full.losses == none.losses);
      INFO("activation peaks: none " << activations_peak(none) << ", selective "
                                     << activations_peak(selective) << ", full "
                                     << activations_peak(full));
      CHECK(activations_peak(selective) < activations_peak(none));
      CHECK(activations_peak(full) < activations_peak(selective));
      // The extra forward is on the clock and in the trace.
      CHECK(none.recompute_seconds == 0.0);
      CHECK(selective.recompute_seconds > 0.0);
      CHECK(full.recompute_seconds > selective.recompute_seconds);
      CHECK(full.modeled_step_seconds > none.modeled_step_seconds);
    }
  }
}

TEST_CASE("recompute modes parse and name themselves; unknown names are refused", "[recompute]") {
  CHECK(parse_recompute("full") == Recompute::full);
  CHECK(std::string(recompute_name(Recompute::selective)) == "selective");
  CHECK_THROWS_WITH(parse_recompute("half"), Catch::Contains("none, selective or full"));
  CHECK(parse_precision("fp16") == DType::f16);
  CHECK_THROWS_WITH(parse_precision("fp8"), Catch::Contains("fp32, bf16 or fp16"));
}

// 1F1B on 2 stages: recompute is a property of the blocks, so pipeline stages get it for free.

namespace {
struct PipelineRun {
  std::map<std::string, std::vector<float>> params;
  std::vector<int64_t> stash_bytes;  // per stage
};
PipelineRun one_f_one_b(Recompute mode) {
  const int P = 2, M = 4;
  GPTConfig cfg;
  cfg.layers = 4;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.seq_len = 8;
  cfg.recompute = mode;
  auto task = data::make_task("markov", 3, {.seq_len = 8});
  cfg.vocab = task->vocab_size();
  const pipeline::Schedule schedule = pipeline::make_schedule("1f1b", P, M, 1);
  WorldOptions o;
  o.ranks = P;
  o.backend = "local";
  o.comm_timeout = 10;
  World world(o);
  PipelineRun run;
  run.stash_bytes.resize(P);
  std::mutex mutex;
  world.run([&](RankContext& ctx) {
    pipeline::StageModel stage = pipeline::StageModel::build(cfg, ctx.rank, P, 1);
    optim::SGD opt(stage.params(), optim::SGDOptions{.lr = 0.1f});
    pipeline::StageStepStats stats;
    for (int step = 0; step < 2; ++step)
      stats = pipeline::train_step(stage, opt, schedule, task->sample(step, 8, 8), *ctx.comm, step);
    std::lock_guard lock(mutex);
    run.stash_bytes[ctx.rank] = stats.stash_bytes;
    for (Param* p : stage.params()) run.params[p->name] = p->data.to_vector();
  });
  return run;
}
}  // namespace

TEST_CASE("recompute in a 1F1B pipeline: bit-identical parameters, smaller stashes",
          "[recompute][pipeline]") {
  PipelineRun none = one_f_one_b(Recompute::none);
  PipelineRun selective = one_f_one_b(Recompute::selective);
  PipelineRun full = one_f_one_b(Recompute::full);
  REQUIRE(!none.params.empty());
  CHECK(selective.params == none.params);
  CHECK(full.params == none.params);
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(selective.stash_bytes[s] < none.stash_bytes[s]);
    CHECK(full.stash_bytes[s] < selective.stash_bytes[s]);
  }
}

// A run as a typed spec (core/run/run.h): validate refuses each broken rule of its table with
// one line; run(spec) trains any alternative of the parallelism to the single device's
// parameters (kept on the root), and every rank reports its figures by name: memory and clock
// for all, a pipeline stage's stash and coordinate, ZeRO's owned chunk and largest unit, DDP's
// buckets and the rows it trained on.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <numeric>
#include <string>

#include "core/data/sampler.h"
#include "core/data/task.h"
#include "core/run/run.h"
#include "exercises/selection.h"

namespace test_run_spec {

using namespace mgpu;

namespace {

constexpr int kSeq = 8;

run::RunSpec spec_for(run::Parallelism parallelism, int ranks, int batch = 8) {
  run::RunSpec spec;
  spec.task = data::make_task("reverse", 7, {.seq_len = kSeq});
  spec.model.vocab = spec.task->vocab_size();
  spec.model.seq_len = kSeq;
  spec.model.layers = 2;
  spec.model.dim = 16;
  spec.model.heads = 2;
  spec.world.ranks = ranks;
  spec.world.clock = ClockKind::modeled;
  spec.world.all_reduce = ex::selected_seams().comm.all_reduce;
  spec.train.steps = 2;
  spec.train.global_batch = batch;
  spec.train.seq = kSeq;
  spec.optimizer = [](const ParamList& params) {
    optim::SGDOptions o;
    o.lr = 0.05f;
    return std::make_unique<optim::SGD>(optim::whole_params(params), o);
  };
  spec.train.keep_params = true;
  spec.parallelism = std::move(parallelism);
  return spec;
}

std::string refusal(const run::RunSpec& spec) {
  try {
    run::validate(spec);
  } catch (const std::exception& e) {  // invalid_argument; a missing seam is a logic_error
    return e.what();
  }
  return "";
}

std::map<std::string, std::vector<float>> params_of(const run::RunResult& r) {
  std::map<std::string, std::vector<float>> all;
  for (const CheckpointTensor& t : r.trained.params) all[t.name] = t.values;
  return all;
}

run::Hybrid pipeline_over(const std::string& schedule) {
  return run::Hybrid{.options = {.schedule = schedule, .microbatches = 4},
                     .seams = ex::selected_seams().hybrid(),
                     .pipeline = true};
}

}  // namespace

TEST_CASE("validate refuses each broken rule with one line naming what works", "[run_spec]") {
  CHECK(refusal(spec_for(run::SingleDevice{}, 1)).empty());
  CHECK(refusal(spec_for(run::SingleDevice{}, 2)).find("use 1 rank") != std::string::npos);

  run::RunSpec tp = spec_for(run::TensorParallel{.seams = ex::selected_seams().tp}, 3);
  CHECK(refusal(tp).find("use 1, 2 ranks") != std::string::npos);

  run::RunSpec zero = spec_for(run::Zero{.options = {.stage = 4}}, 2);
  CHECK(refusal(zero).find("ZeRO stage 4 does not exist") != std::string::npos);
  zero.parallelism = run::Zero{.options = {.stage = 1}};  // no exercise 08 functions
  CHECK(refusal(zero).find("seam 'owned_chunk' is missing") != std::string::npos);
  run::RunSpec shares =
      spec_for(run::DataParallel{.accum = 2, .seams = ex::selected_seams().ddp}, 3);
  CHECK(refusal(shares).find("global batch 8 is not divisible by 3 ranks x 2 accumulation steps") !=
        std::string::npos);

  run::RunSpec dense_ep = spec_for(run::ExpertParallel{.ep = 2}, 2);
  CHECK(refusal(dense_ep).find("add --experts") != std::string::npos);

  run::RunSpec cp = spec_for(run::ContextParallel{.layout = parallel::CpLayout::zigzag}, 3);
  CHECK(refusal(cp).find("does not split into 6 equal chunks") != std::string::npos);

  run::RunSpec hybrid = spec_for(
      run::Hybrid{.options = {.mesh = {.tp = 2, .dp = 2}}, .seams = ex::selected_seams().hybrid()},
      3);
  CHECK(!refusal(hybrid).empty());

  run::RunSpec phantom = spec_for(run::SingleDevice{}, 1);
  phantom.world.device = DeviceKind::phantom;
  phantom.train.checkpoint = "never.ckpt";
  CHECK(refusal(phantom).find("phantom device has none") != std::string::npos);

  run::RunSpec every = spec_for(run::SingleDevice{}, 1);
  every.train.checkpoint_every = 2;
  CHECK(refusal(every).find("--checkpoint-every 2 needs --checkpoint") != std::string::npos);

  run::RunSpec no_task = spec_for(run::SingleDevice{}, 1);
  no_task.task.reset();
  CHECK(refusal(no_task).find("needs a task") != std::string::npos);
}

TEST_CASE("run(spec) trains DDP, ZeRO-3 and a pipeline to the single device's parameters",
          "[run_spec]") {
  const auto single = params_of(run::run(spec_for(run::SingleDevice{}, 1)));
  REQUIRE(!single.empty());
  const run::RunResult ddp =
      run::run(spec_for(run::DataParallel{.seams = ex::selected_seams().ddp}, 2));
  const run::RunResult zero3 =
      run::run(spec_for(run::Zero{.options = {.stage = 3}, .seams = ex::selected_seams().zero}, 2));
  const run::RunResult pipe = run::run(spec_for(pipeline_over("1f1b"), 2));
  for (const run::RunResult* r : {&ddp, &zero3, &pipe}) {
    const auto got = params_of(*r);
    REQUIRE(got.size() == single.size());
    for (const auto& [name, want] : single) {
      CAPTURE(name);
      const std::vector<float>& values = got.at(name);
      REQUIRE(values.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(values[i] == Approx(want[i]).margin(2e-6));
    }
  }
}

TEST_CASE("every rank reports its part's figures by name", "[run_spec]") {
  run::RunSpec zero =
      spec_for(run::Zero{.options = {.stage = 1}, .seams = ex::selected_seams().zero}, 3, 9);
  zero.train.report_ranks = true;
  const run::RunResult z = run::run(zero);
  REQUIRE(z.trained.ranks.size() == 3);
  int64_t updated = 0;
  for (const train::RankReport& r : z.trained.ranks) {
    REQUIRE(r.zero);
    CHECK(r.zero->largest_unit > 0);
    CHECK(r.params_updated < r.params_held);  // its chunk, not the replica
    CHECK(r.memory.peak_total > 0);
    CHECK(r.compute_seconds > 0);
    updated += r.params_updated;
  }
  CHECK(updated == z.trained.ranks[0].params_held);  // the chunks cover the model once

  run::RunSpec pipe = spec_for(pipeline_over("gpipe"), 2);
  pipe.train.report_ranks = true;
  const run::RunResult p = run::run(pipe);
  REQUIRE(p.trained.ranks.size() == 2);
  for (int s = 0; s < 2; ++s) {
    const train::RankReport& r = p.trained.ranks[s];
    REQUIRE(r.stage);
    CHECK(r.rank == s);
    CHECK(r.stage->pp == s);
    CHECK(r.stage->layers == 1);
    CHECK(r.stage->peak_stashed == 4);  // GPipe holds all M micro-batches
    CHECK(!r.zero);
  }

  run::RunSpec ddp = spec_for(run::DataParallel{.seams = ex::selected_seams().ddp}, 2);
  ddp.train.report_ranks = true;
  const run::RunResult d = run::run(ddp);
  std::vector<data::Batch> shards;
  for (const train::RankReport& r : d.trained.ranks) {
    REQUIRE(r.ddp);
    CHECK(r.ddp->buckets >= 1);
    shards.push_back(r.ddp->last_shard);
  }
  CHECK(data::check_shards_partition(ddp.task->sample(1, 8, kSeq), shards).empty());
}

TEST_CASE("a report crosses a process boundary unchanged", "[run_spec]") {
  train::RankReport r{.rank = 3, .compute_seconds = 0.1 + 0.2, .params_held = 12345};
  r.memory.peak[0] = 77;
  r.stage = train::StageFigures{.pp = 1, .layers = 2, .stash_bytes = 4096};
  r.ddp = train::DdpFigures{.buckets = 2, .last_shard = {.B = 1, .T = 2, .tokens = {5, 6}}};
  const train::RankReport back = train::decode_rank_report(train::encode(r));
  CHECK(back.rank == 3);
  CHECK(back.compute_seconds == r.compute_seconds);  // every bit of the double
  CHECK(back.params_held == 12345);
  CHECK(back.memory.peak[0] == 77);
  REQUIRE(back.stage);
  CHECK(back.stage->stash_bytes == 4096);
  REQUIRE(back.ddp);
  CHECK(back.ddp->last_shard.tokens == std::vector<int32_t>{5, 6});
  CHECK(!back.zero);
  CHECK(!back.stores);
}

}  // namespace test_run_spec

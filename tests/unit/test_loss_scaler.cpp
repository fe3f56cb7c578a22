// Dynamic loss scaling: growth after N clean steps, backoff and skip on injected overflows, and
// every rank skipping the same step (the found-inf flag all-reduced over the given groups).
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <limits>
#include <mutex>

#include "common/overflow.h"
#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/model/checkpoint.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/ddp.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/single_device.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero.h"
#include "core/train/forward_backward.h"
#include "core/train/trainer.h"
#include "core/world/world.h"
#include "exercises/selection.h"

namespace test_loss_scaler {

using namespace mgpu;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

// One parameter of 4 elements at 1.0 with plain SGD (lr 1): a step subtracts the gradient.
struct TinyModel {
  Param p{"w", {4}};
  optim::SGD opt{ParamList{&p}, optim::SGDOptions{.lr = 1.0f, .momentum = 0.0f}};
  TinyModel() { p.data.fill(1.0f); }
};
}  // namespace

TEST_CASE("loss scaler starts at 2^16, doubles after growth_interval clean steps",
          "[loss_scaler]") {
  optim::LossScaler defaults;
  CHECK(defaults.scale() == 65536.0f);
  optim::LossScaler s(optim::LossScalerOptions{.initial_scale = 8.0f, .growth_interval = 3});
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale() == 8.0f);
  CHECK(s.update(false));
  CHECK(s.scale() == 16.0f);  // third clean step
  CHECK(s.clean_steps() == 0);
  CHECK_FALSE(s.update(true));  // overflow: halve and skip, the clean count restarts
  CHECK(s.scale() == 8.0f);
  CHECK(s.skipped_steps() == 1);
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale() == 8.0f);  // only two clean steps since the overflow
}

TEST_CASE("loss scaler skips the step on inf/NaN gradients and unscales clean ones",
          "[loss_scaler]") {
  TinyModel m;
  optim::LossScaler scaler(optim::LossScalerOptions{.initial_scale = 1024.0f});
  // Injected overflow: one element inf. The parameter must not move, the scale halves.
  m.p.grad.copy_from(Tensor::from({4}, {1.0f, kInf, 1.0f, 1.0f}));
  CHECK_FALSE(scaler.step(m.opt));
  CHECK(m.p.data.to_vector() == std::vector<float>{1, 1, 1, 1});
  CHECK(m.opt.step_count() == 0);
  CHECK(scaler.scale() == 512.0f);
  m.p.grad.copy_from(Tensor::from({4}, {0, std::nanf(""), 0, 0}));
  CHECK_FALSE(scaler.step(m.opt));
  CHECK(scaler.scale() == 256.0f);
  // Clean gradients computed with scale 256: the step uses gradient / 256.
  m.p.grad.copy_from(Tensor::from({4}, {256.0f, 128.0f, 0.0f, -512.0f}));
  CHECK(scaler.step(m.opt));
  CHECK(m.p.data.to_vector() == std::vector<float>{0.0f, 0.5f, 1.0f, 3.0f});
  CHECK(scaler.skipped_steps() == 2);
}

TEST_CASE("all ranks skip together: the found-inf flag is all-reduced over the groups",
          "[loss_scaler]") {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = 4;
  o.backend = "local";
  o.comm_timeout = 10;
  World world(o);
  std::atomic<int> stepped{0}, skipped{0}, pair_skipped{0}, halved_and_unmoved{0};
  world.run([&](RankContext& ctx) {  // Catch is not thread-safe: ranks count, the test asserts
    TinyModel m;
    optim::LossScaler scaler;
    // Only rank 2 overflows; over the world group every rank must skip.
    m.p.grad.fill(ctx.rank == 2 ? kInf : 1.0f);
    (scaler.step(m.opt, {ctx.comm}) ? stepped : skipped)++;
    if (scaler.scale() == 32768.0f && m.p.data.to_vector()[0] == 1.0f) halved_and_unmoved++;
    // Over groups {0,1} and {2,3} only: the pair holding rank 2 skips, the other steps.
    auto pair = ctx.comm->split(ctx.rank / 2, ctx.rank, "pair");
    m.p.grad.fill(ctx.rank == 2 ? kInf : 1.0f);
    if (!scaler.step(m.opt, {pair.get()})) pair_skipped++;
  });
  CHECK(skipped == 4);
  CHECK(stepped == 0);
  CHECK(halved_and_unmoved == 4);
  CHECK(pair_skipped == 2);
}

// ---- loss scaling in the training layouts (train::Layout::optimizer_step) -----------------

namespace {

// A small fp16 model and the markov task; every layout below trains it for `steps` steps.
GPTConfig fp16_config() {
  GPTConfig cfg;
  cfg.layers = 4;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.seq_len = 8;
  cfg.vocab = data::make_task("markov", 1, {.seq_len = 8})->vocab_size();
  cfg.dtype = DType::f16;
  return cfg;
}

train::OptimizerFactory fp16_adamw() {
  return [](const ParamList& params) {
    return optim::make_adamw(optim::whole_params(params), DType::f16);
  };
}

// What each rank saw, stored by the rank threads and asserted by the test afterwards.
struct RankScaling {
  int64_t skipped = -1;
  float scale = 0;
  int64_t optimizer_steps = -1;
};

struct ScaledRun {
  train::TrainResult result;
  std::vector<RankScaling> ranks;
};

ScaledRun train_scaled(int ranks, const train::TrainOptions& options,
                       const train::LayoutFactory& factory) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = 20;
  World world(o);
  auto task = data::make_task("markov", 1, {.seq_len = 8});
  ScaledRun run;
  run.ranks.resize(static_cast<size_t>(ranks));
  std::mutex mutex;
  run.result = train::train(world, *task, options, factory, {},
                            [&](RankContext& ctx, train::Layout& layout) {
                              std::lock_guard lock(mutex);
                              RankScaling& r = run.ranks[static_cast<size_t>(ctx.rank)];
                              if (const optim::LossScaler* s = layout.loss_scaler())
                                r = {s->skipped_steps(), s->scale(), -1};
                              if (optim::Optimizer* opt = layout.optimizer())
                                r.optimizer_steps = opt->step_count();
                            });
  return run;
}

train::TrainOptions scaled_options(int steps, std::vector<std::pair<int, int>> inject) {
  train::TrainOptions t;
  t.steps = steps;
  t.global_batch = 8;
  t.seq = 8;
  t.loss_scaling = mgpu::testing::overflow_at(std::move(inject));
  return t;
}

// Four fp16 steps on `ranks` ranks whose step-2 gradients overflow on `overflow_rank` only: the
// found-inf all-reduce must make every rank skip step 2 (one skip, the scale halved to 2^15, 3
// optimizer steps). Without the injected overflow nothing is skipped (2^16 fits this model).
void check_overflow_skipped_everywhere(int ranks, int overflow_rank,
                                       const train::LayoutFactory& factory) {
  ScaledRun run = train_scaled(ranks, scaled_options(4, {{2, overflow_rank}}), factory);
  CHECK(run.result.skipped_steps == std::vector<int>{2});
  CHECK(run.result.loss_scale == 32768.0f);
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    CAPTURE(r);
    CHECK(run.ranks[r].skipped == 1);
    CHECK(run.ranks[r].scale == 32768.0f);
    CHECK(run.ranks[r].optimizer_steps == 3);  // 4 steps, one skipped
  }
  ScaledRun clean = train_scaled(ranks, scaled_options(4, {}), factory);
  CHECK(clean.result.skipped_steps.empty());
  CHECK(clean.result.loss_scale == 65536.0f);
}

}  // namespace

TEST_CASE(
    "an overflow on one rank makes every rank skip that step: ddp pipelines zero tp sp and cp",
    "[loss_scaler][train]") {
  const GPTConfig cfg = fp16_config();
  struct Case {
    std::string name;
    train::LayoutFactory factory;
  };
  const std::vector<Case> cases = {
      {"ddp",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::ddp_layout(cfg, *ctx.comm, parallel::DdpOptions{}, 1, fp16_adamw(),
                                     ctx.rank, ex::selected_seams().ddp);
       }},
      {"pipeline 1f1b",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::pipeline_layout(cfg, *ctx.comm, {.schedule = "1f1b", .microbatches = 4},
                                          fp16_adamw(), mgpu::ex::selected_seams().hybrid());
       }},
      {"pipeline zb-h1",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::pipeline_layout(cfg, *ctx.comm, {.schedule = "zb-h1", .microbatches = 4},
                                          fp16_adamw(), mgpu::ex::selected_seams().hybrid());
       }},
      // ZeRO: each rank checks only the gradient chunk it owns; TP: only its weight slices.
      {"zero stage 1",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::zero_layout(cfg, *ctx.comm, parallel::ZeroOptions{.stage = 1},
                                      fp16_adamw(), ex::selected_seams().zero);
       }},
      {"zero stage 2",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::zero_layout(cfg, *ctx.comm, parallel::ZeroOptions{.stage = 2},
                                      fp16_adamw(), ex::selected_seams().zero);
       }},
      {"tensor parallel",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::tensor_parallel(cfg, *ctx.comm, fp16_adamw(), ex::selected_seams().tp);
       }},
      {"sequence parallel",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::sequence_parallel(cfg, *ctx.comm, fp16_adamw(), ex::selected_seams().tp);
       }},
      {"context parallel zigzag",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::context_parallel(cfg, *ctx.comm, parallel::CpLayout::zigzag, cfg.seq_len,
                                           fp16_adamw(), ex::selected_seams().cp);
       }},
      {"zero stage 3",
       [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
         return parallel::zero_layout(cfg, *ctx.comm, parallel::ZeroOptions{.stage = 3},
                                      fp16_adamw(), ex::selected_seams().zero);
       }},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      // Step 2's gradients overflow on rank 1 only (after DDP's all-reduce; in a pipeline, in
      // the last stage's own weights): the found-inf all-reduce must make rank 0 skip too.
      check_overflow_skipped_everywhere(2, 1, c.factory);
    }
  }
}

TEST_CASE("single device: a skipped step leaves the model as it was, the scale halves",
          "[loss_scaler][train]") {
  const GPTConfig cfg = fp16_config();
  auto single = [&](RankContext&) -> std::unique_ptr<train::Layout> {
    return parallel::single_device_layout(cfg, fp16_adamw());
  };
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  // Two steps where the second is skipped hold the same model as one step.
  train::TrainOptions one = scaled_options(1, {});
  one.checkpoint = (dir / "mgpu_scaler_one.ckpt").string();
  train::TrainOptions two_skipped = scaled_options(2, {{1, 0}});
  two_skipped.checkpoint = (dir / "mgpu_scaler_two.ckpt").string();
  ScaledRun a = train_scaled(1, one, single);
  ScaledRun b = train_scaled(1, two_skipped, single);
  CHECK(b.result.skipped_steps == std::vector<int>{1});
  CHECK(b.ranks[0].scale == 32768.0f);
  auto params = [](const std::string& path) {
    std::vector<std::vector<float>> values;
    for (auto& t : load_checkpoint_tensors(path).tensors) values.push_back(t.values);
    return values;
  };
  CHECK(params(one.checkpoint) == params(two_skipped.checkpoint));
}

TEST_CASE("the loss scaler's state round-trips through a checkpoint: resume continues bit for bit",
          "[loss_scaler][train]") {
  const GPTConfig cfg = fp16_config();
  auto ddp = [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
    return parallel::ddp_layout(cfg, *ctx.comm, parallel::DdpOptions{}, 1, fp16_adamw(), ctx.rank,
                                ex::selected_seams().ddp);
  };
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  // Step 1 overflows (scale 2^15, clean count restarts); growth every 3 clean steps, so the
  // scale after step 5 depends on the clean count carried across the resume at step 3.
  auto options = [&](int steps, const std::string& name) {
    train::TrainOptions t = scaled_options(steps, {{1, 0}});
    t.loss_scaling->scaler.growth_interval = 3;
    t.checkpoint = (dir / name).string();
    return t;
  };
  train::TrainOptions straight = options(6, "mgpu_scaler_straight.ckpt");
  train::TrainOptions half = options(3, "mgpu_scaler_half.ckpt");
  train::TrainOptions resumed = options(6, "mgpu_scaler_resumed.ckpt");
  resumed.resume = half.checkpoint;
  ScaledRun a = train_scaled(2, straight, ddp);
  ScaledRun h = train_scaled(2, half, ddp);
  ScaledRun r = train_scaled(2, resumed, ddp);
  const CheckpointInfo saved = read_checkpoint_info(half.checkpoint);
  CHECK(saved.optimizer.at("loss_scaler").at("scale") == 32768.0f);
  CHECK(saved.optimizer.at("loss_scaler").at("good_steps") == 1);
  // step 3 and 4 clean -> 3 clean since the overflow: x2 after step 4; step 5 clean (1).
  CHECK(a.result.loss_scale == 65536.0f);
  CHECK(r.result.loss_scale == a.result.loss_scale);
  CHECK(r.ranks[1].scale == a.ranks[1].scale);
  CHECK(read_checkpoint_info(resumed.checkpoint).optimizer.at("loss_scaler") ==
        read_checkpoint_info(straight.checkpoint).optimizer.at("loss_scaler"));
  REQUIRE(a.result.losses.size() == 6);
  REQUIRE(r.result.losses.size() == 3);
  for (int s = 0; s < 3; ++s) CHECK(r.result.losses[s] == a.result.losses[3 + s]);
  auto tensors = [](const std::string& path) {
    std::vector<std::vector<float>> values;
    for (auto& t : load_checkpoint_tensors(path).tensors) values.push_back(t.values);
    return values;
  };
  CHECK(tensors(resumed.checkpoint) == tensors(straight.checkpoint));
}

TEST_CASE("fp16 in a layout that does not run the loss scaler is refused with one line",
          "[loss_scaler][train]") {
  // A layout written before loss scaling: it steps its optimizer itself, so a scale would never
  // be applied or removed. The trainer notices after the first step and says what to use.
  class PlainLayout : public parallel::MeshLayout {
   public:
    PlainLayout(const GPTConfig& cfg, const train::OptimizerFactory& make_optimizer)
        : MeshLayout(cfg, std::make_unique<parallel::SingleDevicePart>(), make_optimizer) {}
    train::StepOutcome step(const data::Batch& batch, int) override {
      const float loss = train::forward_backward_traced(model(), batch);
      optimizer()->step();
      return {.loss = loss};
    }
  };
  const GPTConfig cfg = fp16_config();
  auto plain = [&](RankContext&) -> std::unique_ptr<train::Layout> {
    return std::make_unique<PlainLayout>(cfg, fp16_adamw());
  };
  std::string error;
  try {
    train_scaled(1, scaled_options(2, {}), plain);
  } catch (const RankError& e) {
    try {
      std::rethrow_exception(e.cause());
    } catch (const std::invalid_argument& bad) {
      error = bad.what();
    }
  }
  CHECK_THAT(error, Catch::Contains("does not run yet") && Catch::Contains("--precision bf16"));
  CHECK(error.find('\n') == std::string::npos);
  // The same layout without loss scaling trains.
  train::TrainOptions bf16 = scaled_options(2, {});
  bf16.loss_scaling.reset();
  CHECK(train_scaled(1, bf16, plain).result.losses.size() == 2);
}

// Hybrid DP x TP x PP: an overflow in one rank's gradients (one tp slice of one stage of one
// replica, or, under ZeRO-1, one dp chunk) makes all 8 ranks skip that step together, because the
// found-inf flag is all-reduced over the dp, pp and tp groups.
TEST_CASE("hybrid fp16: an overflow on one rank makes all 8 ranks skip that step",
          "[hybrid][loss_scaler][train]") {
  const GPTConfig cfg = fp16_config();
  for (int zero : {0, 1}) {
    INFO("--zero " << zero);
    parallel::HybridOptions options{.schedule = "1f1b", .microbatches = 2, .zero = zero};
    options.mesh.tp = 2;
    options.mesh.dp = 2;
    options.mesh.pp = 2;
    const train::LayoutFactory hybrid = [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
      return std::make_unique<parallel::HybridLayout>(cfg, *ctx.comm, options, fp16_adamw(),
                                                      ex::selected_seams().hybrid());
    };
    // rank 5 = dp0 pp1 tp1: the last stage's second tp slice, in the first replica
    check_overflow_skipped_everywhere(8, 5, hybrid);
  }
}

}  // namespace test_loss_scaler

// Dynamic loss scaling: growth after N clean steps, backoff and skip on injected overflows, and
// every rank skipping the same step (the found-inf flag all-reduced over the given groups).
#include <catch2/catch.hpp>

#include <atomic>
#include <limits>

#include "core/comm/comm.h"
#include "core/optim/mixed_precision.h"
#include "core/runtime/world.h"

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
  o.ranks = 4;
  o.backend = "local";
  o.comm_timeout = 10;
  World world(o);
  std::atomic<int> stepped{0}, skipped{0}, pair_skipped{0};
  world.run([&](RankContext& ctx) {
    TinyModel m;
    optim::LossScaler scaler;
    // Only rank 2 overflows; over the world group every rank must skip.
    m.p.grad.fill(ctx.rank == 2 ? kInf : 1.0f);
    (scaler.step(m.opt, {ctx.comm}) ? stepped : skipped)++;
    CHECK(scaler.scale() == 32768.0f);
    CHECK(m.p.data.to_vector()[0] == 1.0f);
    // Over groups {0,1} and {2,3} only: the pair holding rank 2 skips, the other steps.
    auto pair = ctx.comm->split(ctx.rank / 2, ctx.rank, "pair");
    m.p.grad.fill(ctx.rank == 2 ? kInf : 1.0f);
    if (!scaler.step(m.opt, {pair.get()})) pair_skipped++;
  });
  CHECK(skipped == 4);
  CHECK(stepped == 0);
  CHECK(pair_skipped == 2);
}

TEST_CASE("bf16/fp16 on --device cuda is refused with one line, never run as fp32",
          "[loss_scaler][precision]") {
  CHECK_NOTHROW(optim::check_precision_supported(DType::f32, DeviceKind::cuda));
  CHECK_NOTHROW(optim::check_precision_supported(DType::bf16, DeviceKind::cpu));
  CHECK_NOTHROW(optim::check_precision_supported(DType::f16, DeviceKind::phantom));
  CHECK_THROWS_WITH(optim::check_precision_supported(DType::bf16, DeviceKind::cuda),
                    Catch::Contains("use --precision fp32 on --device cuda"));
}

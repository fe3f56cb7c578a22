// Optimizers: match the textbook formulas step by step, decay is decoupled in AdamW, state memory
// is 8 bytes/param (AdamW) and 4 bytes/param (SGD momentum), slices update only their range.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops/optimizer_kernels.h"
#include "core/optim/optimizer.h"
#include "core/runtime/context.h"

namespace test_optim {

using namespace mgpu;
using namespace mgpu::optim;

namespace {

struct Fixture {
  RankContext ctx{0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled};
  ScopedRank guard{ctx};
};

void set(Tensor t, const std::vector<float>& values) {
  t.copy_from(Tensor::from(t.shape(), values));
}

// The gradients used at steps 1, 2, 3.
const std::vector<std::vector<float>> kGrads = {
    {0.5f, -1.0f, 2.0f}, {0.1f, 0.3f, -0.2f}, {-0.4f, 0.0f, 1.5f}};
const std::vector<float> kInit = {1.0f, -2.0f, 0.5f};

}  // namespace

TEST_CASE("AdamW matches the reference formulas over 3 steps", "[optim]") {
  Fixture f;
  Param w("w", {3});
  set(w.data, kInit);
  AdamWOptions o{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
  AdamW opt(ParamList{&w}, o);

  std::vector<double> p(kInit.begin(), kInit.end()), m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    set(w.grad, kGrads[t - 1]);
    opt.step();
    for (int i = 0; i < 3; ++i) {
      double g = kGrads[t - 1][i];
      p[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      double m_hat = m[i] / (1 - std::pow(o.beta1, t)), v_hat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
    auto got = w.data.to_vector();
    for (int i = 0; i < 3; ++i) CHECK(got[i] == Approx(p[i]).epsilon(1e-5));
  }
  CHECK(opt.step_count() == 3);
  // First step of Adam moves every weight by ~lr (m_hat / sqrt(v_hat) = sign(g)): a known fact.
}

TEST_CASE("AdamW first step moves each weight by lr against the gradient sign", "[optim]") {
  Fixture f;
  Param w("w", {3});
  set(w.data, {0.0f, 0.0f, 0.0f});
  set(w.grad, {3.0f, -0.01f, 100.0f});
  AdamW opt(ParamList{&w}, {.lr = 0.01f, .weight_decay = 0.0f});
  opt.step();
  auto got = w.data.to_vector();
  CHECK(got[0] == Approx(-0.01f));
  CHECK(got[1] == Approx(0.01f));
  CHECK(got[2] == Approx(-0.01f));
}

TEST_CASE("AdamW weight decay is decoupled from the gradient", "[optim]") {
  Fixture f;
  // With a zero gradient, Adam's moments stay 0 and the update is pure decay: p *= 1 - lr * wd.
  // (L2 regularisation inside Adam would instead be normalised to a step of ~lr.)
  Param w("w", {2});
  set(w.data, {2.0f, -4.0f});
  AdamW opt(ParamList{&w}, {.lr = 0.1f, .weight_decay = 0.5f});
  opt.step();
  opt.step();
  auto got = w.data.to_vector();
  CHECK(got[0] == Approx(2.0 * 0.95 * 0.95));
  CHECK(got[1] == Approx(-4.0 * 0.95 * 0.95));
}

TEST_CASE("SGD with momentum matches the reference formulas over 3 steps", "[optim]") {
  Fixture f;
  Param w("w", {3});
  set(w.data, kInit);
  SGDOptions o{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
  SGD opt(ParamList{&w}, o);
  std::vector<double> p(kInit.begin(), kInit.end()), buf(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    set(w.grad, kGrads[t - 1]);
    opt.step();
    for (int i = 0; i < 3; ++i) {
      double d = kGrads[t - 1][i] + o.weight_decay * p[i];
      buf[i] = o.momentum * buf[i] + d;
      p[i] -= o.lr * buf[i];
    }
    auto got = w.data.to_vector();
    for (int i = 0; i < 3; ++i) CHECK(got[i] == Approx(p[i]).epsilon(1e-6));
  }
}

TEST_CASE("plain SGD (no momentum) keeps no state", "[optim]") {
  Fixture f;
  Param w("w", {2});
  set(w.data, {1.0f, 1.0f});
  set(w.grad, {1.0f, -2.0f});
  SGD opt(ParamList{&w}, {.lr = 0.5f, .momentum = 0.0f});
  CHECK(opt.state().empty());
  opt.step();
  CHECK(w.data.to_vector() == std::vector<float>{0.5f, 2.0f});
}

TEST_CASE("optimizer state costs 8 bytes/param for AdamW and 4 for SGD momentum", "[optim]") {
  Fixture f;
  Param a("a", {10, 20}), b("b", {30});
  ParamList params{&a, &b};
  const int64_t n = 230;
  {
    AdamW adam(params);
    CHECK(f.ctx.allocator.stats().current[static_cast<int>(MemCategory::optimizer_state)] == 8 * n);
    CHECK(adam.state_bytes() == 8 * n);
    REQUIRE(adam.state().size() == 4);
    CHECK(adam.state()[0].name == "adamw.m.a");
    CHECK(adam.state()[3].name == "adamw.v.b");
  }
  CHECK(f.ctx.allocator.stats().current[static_cast<int>(MemCategory::optimizer_state)] == 0);
  SGD sgd(params);
  CHECK(f.ctx.allocator.stats().current[static_cast<int>(MemCategory::optimizer_state)] == 4 * n);
  CHECK(sgd.state()[1].name == "sgd.momentum.b");
}

TEST_CASE("a slice optimizer updates only its range and holds only its state", "[optim]") {
  Fixture f;
  Param w("w", {6});
  set(w.data, {1, 1, 1, 1, 1, 1});
  set(w.grad, {1, 1, 1, 1, 1, 1});
  // What ZeRO does: this rank owns elements [2, 5) of w.
  AdamW opt(std::vector<ParamSlice>{{&w, 2, 5}}, {.lr = 0.1f, .weight_decay = 0.0f});
  CHECK(opt.state_bytes() == 8 * 3);
  CHECK(opt.state()[0].name == "adamw.m.w[2:5]");
  opt.step();
  auto got = w.data.to_vector();
  CHECK(got[0] == 1.0f);
  CHECK(got[1] == 1.0f);
  CHECK(got[2] == Approx(0.9f));
  CHECK(got[4] == Approx(0.9f));
  CHECK(got[5] == 1.0f);
  opt.zero_grad();
  CHECK(w.grad.to_vector() == std::vector<float>(6, 0.0f));
}

TEST_CASE("lr setter takes effect on the next step", "[optim]") {
  Fixture f;
  Param w("w", {1});
  set(w.grad, {1.0f});
  SGD opt(ParamList{&w}, {.lr = 1.0f, .momentum = 0.0f});
  opt.set_lr(0.25f);
  opt.step();
  CHECK(w.data.to_vector()[0] == -0.25f);
  CHECK(opt.hyperparams()["lr"] == 0.25f);
}

TEST_CASE("kernels charge the modeled clock on the phantom device too", "[optim]") {
  RankContext ctx{0, 1, Device::phantom(), HardwareProfile::ideal(1e-3), ClockKind::modeled};
  ScopedRank guard{ctx};
  Param w("w", {1000});
  AdamW opt(ParamList{&w});
  double before = ctx.clock.compute_now();
  opt.step();
  CHECK(ctx.clock.compute_now() == Approx(before + 1e-3));
  CHECK(ctx.allocator.stats().current[static_cast<int>(MemCategory::optimizer_state)] == 8000);
}

}  // namespace test_optim

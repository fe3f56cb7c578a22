// Mixed precision: bf16/fp16 rounding bit for bit against reference values, 2-byte tensors, the
// memory per parameter measured by the allocator, and bf16 training close to fp32.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <mutex>

#include "common/selected_seams.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/ddp.h"
#include "core/parallel/pipeline/layout.h"
#include "core/runtime/context.h"
#include "core/runtime/world.h"
#include "core/train/trainer.h"
#include "exercises/selection.h"
#include "lessons/lesson.h"
#include "lessons/training.h"

using namespace mgpu;

namespace {
float from_bits(uint32_t b) {
  return std::bit_cast<float>(b);
}
float pow2(int e) {
  return std::ldexp(1.0f, e);
}
}  // namespace

TEST_CASE("bf16 rounds to nearest even, keeps inf/NaN, overflows and handles subnormals",
          "[precision]") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(f32_to_bf16_bits(-2.0f) == 0xC000);
  CHECK(f32_to_bf16_bits(from_bits(0x3F808000)) == 0x3F80);  // tie, kept part even: down
  CHECK(f32_to_bf16_bits(from_bits(0x3F818000)) == 0x3F82);  // tie, kept part odd: up
  CHECK(f32_to_bf16_bits(from_bits(0x3F808001)) == 0x3F81);  // just above half: up
  CHECK(f32_to_bf16_bits(from_bits(0x3F807FFF)) == 0x3F80);  // just below half: down
  CHECK(f32_to_bf16_bits(from_bits(0x7F7F7FFF)) == 0x7F7F);
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(f32_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(f32_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(f32_to_bf16_bits(from_bits(0x7FC00000)) == 0x7FC0);
  CHECK(f32_to_bf16_bits(from_bits(0x7F800001)) == 0x7FC0);  // signalling NaN stays a NaN
  CHECK(f32_to_bf16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_bf16_bits(from_bits(0x00010000)) == 0x0001);  // fp32 subnormal, exact
  CHECK(f32_to_bf16_bits(from_bits(0x00018000)) == 0x0002);  // subnormal tie, odd: up
  CHECK(f32_to_bf16_bits(from_bits(0x00008000)) == 0x0000);  // subnormal tie, even: to 0
  CHECK(f32_to_bf16_bits(from_bits(0x807FFFFF)) == 0x8080);  // up into the smallest normal
  CHECK(bf16_bits_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_bits_to_f32(0x4049) == 3.140625f);
  CHECK(round_to(DType::bf16, 3.14159265f) == 3.140625f);
  CHECK(std::isnan(bf16_bits_to_f32(0x7FC0)));
}

TEST_CASE("fp16 rounds to nearest even with its range: 65504, inf, subnormals, flush to zero",
          "[precision]") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3C00);
  CHECK(f32_to_f16_bits(-2.0f) == 0xC000);
  CHECK(f32_to_f16_bits(0.1f) == 0x2E66);
  CHECK(f32_to_f16_bits(1.0f / 3.0f) == 0x3555);
  CHECK(f32_to_f16_bits(1.0f + pow2(-11)) == 0x3C00);      // tie, even: down
  CHECK(f32_to_f16_bits(1.0f + 3 * pow2(-11)) == 0x3C02);  // tie, odd: up
  CHECK(f32_to_f16_bits(65504.0f) == 0x7BFF);              // largest finite
  CHECK(f32_to_f16_bits(65519.0f) == 0x7BFF);              // below half an ulp past it
  CHECK(f32_to_f16_bits(65520.0f) == 0x7C00);              // the tie rounds to inf
  CHECK(f32_to_f16_bits(1e6f) == 0x7C00);
  CHECK(f32_to_f16_bits(-1e6f) == 0xFC00);
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
  CHECK(f32_to_f16_bits(-0.0f) == 0x8000);
  CHECK(f32_to_f16_bits(pow2(-14)) == 0x0400);              // smallest normal
  CHECK(f32_to_f16_bits(pow2(-24)) == 0x0001);              // smallest subnormal
  CHECK(f32_to_f16_bits(1023 * pow2(-24)) == 0x03FF);       // largest subnormal
  CHECK(f32_to_f16_bits(1023.5f * pow2(-24)) == 0x0400);    // tie, odd: up to normal
  CHECK(f32_to_f16_bits(pow2(-25)) == 0x0000);              // tie with 0: even is 0
  CHECK(f32_to_f16_bits(from_bits(0x33000001)) == 0x0001);  // just above: 2^-24
  CHECK(f32_to_f16_bits(3 * pow2(-25)) == 0x0002);          // 1.5 ulp: tie to 2
  CHECK(f32_to_f16_bits(5 * pow2(-25)) == 0x0002);          // 2.5 ulp: tie to 2
  CHECK(f32_to_f16_bits(1e-8f) == 0x0000);                  // flushed to zero
  CHECK(f32_to_f16_bits(-1e-8f) == 0x8000);
  CHECK(f16_bits_to_f32(0x0001) == pow2(-24));
  CHECK(f16_bits_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_bits_to_f32(0x3555) == 0.333251953125f);
  CHECK(std::isinf(f16_bits_to_f32(0x7C00)));
  CHECK(std::isnan(f16_bits_to_f32(0x7E00)));
  // Every one of the 63488 finite fp16 values survives a round trip through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7C00) != 0x7C00) REQUIRE(f32_to_f16_bits(f16_bits_to_f32(uint16_t(h))) == h);
}

TEST_CASE("2-byte tensors hold 2 bytes per element and round on every store", "[precision]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  Tensor h = Tensor::empty({1000}, MemCategory::activations, DType::f16);
  CHECK(h.bytes() == 2000);
  CHECK(ctx.allocator.stats().current[int(MemCategory::activations)] == 2000);
  h.fill(0.1f);
  CHECK(h.to_vector()[7] == f16_bits_to_f32(0x2E66));

  // An op computes in fp32 and rounds its result once: 1 + 2^-9 is not a bf16 value.
  Tensor a = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  Tensor b = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  Tensor out = Tensor::empty({2}, MemCategory::workspace, DType::bf16);
  a.fill(1.0f);
  b.fill(pow2(-9));
  ops::add(out, a, b);
  CHECK(out.to_vector()[0] == 1.0f);  // 1 + 2^-9: below half a bf16 ulp (2^-8), rounds down
  b.fill(3 * pow2(-9));
  ops::add(out, a, b);
  CHECK(out.to_vector()[0] == 1.0f + pow2(-7));  // 1 + 1.5 ulp: tie, rounds to even (2 ulp)

  // fp16 overflow and underflow are counted.
  store_counters() = {};
  Tensor big = Tensor::from({3}, {7e4f, 1e-9f, 0.0f});
  Tensor small = Tensor::empty({3}, MemCategory::workspace, DType::f16);
  ops::convert(small, big);
  CHECK(std::isinf(small.to_vector()[0]));
  CHECK(small.to_vector()[1] == 0.0f);
  CHECK(store_counters().overflowed_to_inf == 1);
  CHECK(store_counters().flushed_to_zero == 1);  // the exact 0 is not counted
  CHECK(ops::count_nonfinite(small) == 1);
}

TEST_CASE("bytes per parameter from the allocator: fp32 4+4+8, bf16/fp16 2+4+12", "[precision]") {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    DYNAMIC_SECTION(precision_name(dtype)) {
      RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
      ScopedRank installed(ctx);
      GPTConfig cfg;
      cfg.dtype = dtype;
      GPT model(cfg);
      auto opt = optim::make_adamw(optim::whole_params(model.params()), dtype);
      const int64_t n = model.num_params();
      const MemoryStats s = ctx.allocator.stats();
      auto current = [&](MemCategory c) { return s.current[int(c)]; };
      const int64_t low = dtype == DType::f32 ? 4 : 2;
      CHECK(current(MemCategory::parameters) == low * n);
      CHECK(current(MemCategory::gradients) == 4 * n);
      CHECK(current(MemCategory::optimizer_state) == (dtype == DType::f32 ? 8 : 12) * n);
      for (Param* p : model.params()) CHECK(p->data.dtype() == dtype);
    }
  }
}

TEST_CASE("master weights: the update lands in fp32 and is rounded into the model", "[precision]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank installed(ctx);
  Param p("w", {4});
  p.data = Tensor::empty({4}, MemCategory::parameters, DType::bf16);
  p.data.fill(1.0f);
  p.grad.fill(1.0f);
  optim::SGDOptions sgd{.lr = 1e-3f, .momentum = 0.0f};
  optim::MixedPrecision opt({{&p, 0, 4}}, [&](std::vector<optim::ParamSlice> s) {
    return std::make_unique<optim::SGD>(std::move(s), sgd);
  });
  for (int i = 0; i < 3; ++i) opt.step();
  // 1 - 0.003 is below half a bf16 ulp of 1 (2^-8 = 0.0039 below 1 is 2^-9): a bf16-only SGD
  // would stay at 1.0 forever; the fp32 master accumulates the updates.
  CHECK(opt.master_params()[0]->data.to_vector()[0] == Approx(0.997f).epsilon(1e-6));
  CHECK(p.data.to_vector()[0] ==
        round_to(DType::bf16, opt.master_params()[0]->data.to_vector()[0]));
  CHECK(opt.hyperparams()["master_weights"] == "fp32");
}

namespace {
// The default single-device config (2 layers, dim 64, seq 32, 150 steps of batch 16, AdamW lr
// 3e-3) in `precision`, through the one training loop.
lessons::MeasuredRun default_run(DType precision, bool loss_scaling = true) {
  lessons::CommonOptions c;
  auto task = lessons::make_task(c);
  GPTConfig cfg = lessons::model_config(c, *task);
  cfg.dtype = precision;
  return lessons::train_measured(c, cfg, *task, loss_scaling);
}
}  // namespace

TEST_CASE("bf16 and fp16 training on the default single-device config end within 0.15 of fp32",
          "[precision][train]") {
  const lessons::MeasuredRun fp32 = default_run(DType::f32);
  const lessons::MeasuredRun bf16 = default_run(DType::bf16);
  const lessons::MeasuredRun fp16 = default_run(DType::f16);
  INFO("final loss: fp32 " << fp32.losses.back() << ", bf16 " << bf16.losses.back() << ", fp16 "
                           << fp16.losses.back() << " (scale " << fp16.loss_scale << ", "
                           << fp16.skipped_steps.size() << " skipped)");
  CHECK(fp32.losses.back() < fp32.losses.front() - 0.5f);  // it did train
  // bf16 (8 mantissa bits): the bound. fp16 with loss scaling keeps 11 bits, so it must
  // meet the same bound; its loss scale keeps the gradients in range, so (unlike bf16) its
  // distance to fp32 is rounding, not lost gradients.
  CHECK(std::abs(bf16.losses.back() - fp32.losses.back()) < 0.15f);
  CHECK(std::abs(fp16.losses.back() - fp32.losses.back()) < 0.15f);
  CHECK(std::abs(fp16.losses.back() - bf16.losses.back()) < 0.15f);
  CHECK(bf16.final_params != fp32.final_params);  // and they really ran in 2 bytes
  CHECK(fp16.final_params != fp32.final_params);
  CHECK(fp16.final_params != bf16.final_params);
}

TEST_CASE("bytes per parameter from the allocator in ddp and pipeline ranks, per precision",
          "[precision][train]") {
  GPTConfig base;
  base.layers = 4;
  base.dim = 16;
  base.heads = 2;
  base.seq_len = 8;
  auto task = data::make_task("markov", 1, {.seq_len = 8});
  base.vocab = task->vocab_size();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const std::string layout_name : {"ddp", "pipeline"}) {
      DYNAMIC_SECTION(precision_name(dtype) << " " << layout_name) {
        GPTConfig cfg = base;
        cfg.dtype = dtype;
        train::OptimizerFactory adamw = [dtype](const ParamList& params) {
          return optim::make_adamw(optim::whole_params(params), dtype);
        };
        WorldOptions o;
        o.all_reduce = selected_all_reduce();
        o.ranks = 2;
        o.backend = "local";
        o.comm_timeout = 20;
        World world(o);
        train::TrainOptions t{.steps = 2, .global_batch = 8, .seq = 8};
        if (dtype == DType::f16) t.loss_scaling = train::LossScaling{};
        struct Measured {
          int64_t params = 0, weights = 0, gradients = 0, optimizer = 0;
        };
        std::vector<Measured> ranks(2);
        std::mutex mutex;
        train::train(
            world, *task, t,
            [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
              if (layout_name == "ddp")
                return std::make_unique<parallel::DdpLayout>(cfg, *ctx.comm, parallel::DdpOptions{},
                                                             1, adamw, ctx.rank,
                                                             ex::selected_seams().ddp);
              return std::make_unique<pipeline::PipelineLayout>(
                  cfg, *ctx.comm, pipeline::make_schedule("1f1b", 2, 4, 1, compute_orders()), 1,
                  adamw);
            },
            {}, [&](RankContext& ctx, train::Layout& layout) {  // after training, still alive
              const MemoryStats s = ctx.allocator.stats();
              Measured m;
              for (const train::TensorShard& shard : layout.shards())
                if (shard.kind == "param") m.params += shard.local.numel();
              m.weights = s.current[int(MemCategory::parameters)];
              m.gradients = s.current[int(MemCategory::gradients)];
              m.optimizer = s.current[int(MemCategory::optimizer_state)];
              std::lock_guard lock(mutex);
              ranks[static_cast<size_t>(ctx.rank)] = m;
            });
        const int64_t low = dtype == DType::f32 ? 4 : 2;
        const int64_t state = dtype == DType::f32 ? 8 : 12;  // m, v (+ the fp32 master)
        for (const Measured& m : ranks) {
          CAPTURE(m.params, m.weights, m.gradients, m.optimizer);
          REQUIRE(m.params > 0);
          CHECK(m.weights == low * m.params);
          CHECK(m.gradients == 4 * m.params);  // fp32 gradients in every precision
          CHECK(m.optimizer == state * m.params);
        }
      }
    }
  }
}

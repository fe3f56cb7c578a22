// Graded: exercise 05, memory estimator (docs/exercises/05-memory-estimator.md).
// Exact formulas per precision and ZeRO stage, the GPT parameter count against core's model, and
// the fp32 estimate against the bytes the allocator measured in a real training step.
#include <catch2/catch.hpp>

#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/model/gpt.h"
#include "exercises/exercises.h"
#include "grade/grade_support.h"
#include "lessons/single_device.h"

using namespace mgpu;
using ex::MemoryEstimate;
using ex::MemoryQuery;
using ex::Precision;

namespace {

MemoryEstimate estimate(const MemoryQuery& q) {
  return grade::grading_mine("ex05") ? mine::estimate_memory(q) : reference::estimate_memory(q);
}

int64_t param_count(const GPTConfig& cfg) {
  return grade::grading_mine("ex05") ? mine::gpt_param_count(cfg) : reference::gpt_param_count(cfg);
}

MemoryQuery query(int64_t params, Precision p, int dp = 1, int zero = 0) {
  return MemoryQuery{params, p, dp, zero};
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

TEST_CASE("ex05 fp32 without sharding is 4 + 4 + 8 bytes per parameter (2 pts)", "[grade][ex05]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{7'000'000'000}}) {
    INFO("params=" << n);
    CHECK(estimate(query(n, Precision::fp32)) == MemoryEstimate{4 * n, 4 * n, 8 * n});
  }
}

TEST_CASE("ex05 mixed bf16 without sharding is 2 + 4 + 12 bytes per parameter (2 pts)",
          "[grade][ex05]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{7'000'000'000}}) {
    INFO("params=" << n);
    MemoryEstimate e = estimate(query(n, Precision::mixed_bf16));
    CHECK(e == MemoryEstimate{2 * n, 4 * n, 12 * n});  // gradients stay fp32, as lessons measure
    CHECK(e.total() == 18 * n);  // mixed precision does not shrink the training state
  }
}

TEST_CASE("ex05 plain data parallelism replicates everything (1 pts)", "[grade][ex05]") {
  const int64_t n = 1'000'003;
  for (int dp : {1, 2, 8, 64})
    for (Precision p : {Precision::fp32, Precision::mixed_bf16}) {
      INFO("dp=" << dp);
      CHECK(estimate(query(n, p, dp, 0)) == estimate(query(n, p, 1, 0)));
    }
}

TEST_CASE("ex05 ZeRO stages 1 2 3 shard optimizer then gradients then parameters (3 pts)",
          "[grade][ex05]") {
  const int64_t n = 1'000'003;  // not divisible by dp: the largest shard has ceil(n / dp)
  for (int dp : {1, 3, 8}) {
    const int64_t s = ceil_div(n, dp);
    INFO("dp=" << dp);
    CHECK(estimate(query(n, Precision::fp32, dp, 1)) == MemoryEstimate{4 * n, 4 * n, 8 * s});
    CHECK(estimate(query(n, Precision::fp32, dp, 2)) == MemoryEstimate{4 * n, 4 * s, 8 * s});
    CHECK(estimate(query(n, Precision::fp32, dp, 3)) == MemoryEstimate{4 * s, 4 * s, 8 * s});
    CHECK(estimate(query(n, Precision::mixed_bf16, dp, 1)) == MemoryEstimate{2 * n, 4 * n, 12 * s});
    CHECK(estimate(query(n, Precision::mixed_bf16, dp, 2)) == MemoryEstimate{2 * n, 4 * s, 12 * s});
    CHECK(estimate(query(n, Precision::mixed_bf16, dp, 3)) == MemoryEstimate{2 * s, 4 * s, 12 * s});
  }
}

TEST_CASE("ex05 Adam runs out of memory: 7B on 80 GB needs ZeRO over 8 ranks (1 pts)",
          "[grade][ex05]") {
  const int64_t n = 7'000'000'000, gpu = 80'000'000'000;
  CHECK(estimate(query(n, Precision::mixed_bf16, 8, 0)).total() > gpu);
  CHECK(estimate(query(n, Precision::mixed_bf16, 8, 1)).total() < gpu);
  CHECK(estimate(query(n, Precision::mixed_bf16, 8, 3)).total() == 18 * ceil_div(n, 8));
}

TEST_CASE("ex05 bad queries throw invalid_argument (1 pts)", "[grade][ex05]") {
  CHECK_THROWS_AS(estimate(query(-1, Precision::fp32)), std::invalid_argument);
  CHECK_THROWS_AS(estimate(query(10, Precision::fp32, 0)), std::invalid_argument);
  CHECK_THROWS_AS(estimate(query(10, Precision::fp32, 2, 4)), std::invalid_argument);
  CHECK_THROWS_AS(estimate(query(10, Precision::fp32, 2, -1)), std::invalid_argument);
  CHECK(estimate(query(10, Precision::fp32, 2, 3)).total() == 80);  // and valid ones do not
}

TEST_CASE("ex05 gpt_param_count matches the model in core (2 pts)", "[grade][ex05]") {
  for (auto [vocab, seq, layers, dim, heads] :
       {std::tuple{64, 64, 2, 64, 4}, std::tuple{50, 17, 1, 32, 2}, std::tuple{97, 8, 3, 48, 6},
        std::tuple{64, 32, 4, 16, 1}}) {
    GPTConfig cfg;
    cfg.vocab = vocab;
    cfg.seq_len = seq;
    cfg.layers = layers;
    cfg.dim = dim;
    cfg.heads = heads;
    INFO("vocab=" << vocab << " seq=" << seq << " layers=" << layers << " dim=" << dim);
    CHECK(param_count(cfg) == GPT(cfg).num_params());
  }
}

TEST_CASE("ex05 estimate equals the allocator's measured bytes in fp32 bf16 and fp16 (2 pts)",
          "[grade][ex05]") {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    INFO("precision " << precision);
    lessons::CommonOptions c;
    c.steps = 1;
    c.batch = 8;
    c.seq = 16;
    c.dim = 32;
    c.heads = 2;
    c.layers = 2;
    c.quiet = true;
    c.precision = precision;
    std::ostringstream out;
    lessons::SingleDeviceResult r = lessons::train_single_device(c, out);
    auto measured = [&](MemCategory cat) { return r.memory.peak[static_cast<int>(cat)]; };
    const Precision p = c.precision == "fp32" ? Precision::fp32 : Precision::mixed_bf16;
    MemoryEstimate e = estimate(query(r.params, p));
    CHECK(e.parameters == measured(MemCategory::parameters));
    CHECK(e.gradients == measured(MemCategory::gradients));
    CHECK(e.optimizer_state == measured(MemCategory::optimizer_state));
  }
}

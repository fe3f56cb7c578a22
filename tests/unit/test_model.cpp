// The tiny GPT: config validation, seeded init, every layer's backward and the whole model's
// gradient against finite differences (tolerance: see test_ops_gradcheck.h), gradient
// accumulation, and a phantom run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "core/model/gpt.h"
#include "core/model/init.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"
#include "core/theory/model_states.h"
#include "test_model_gradcheck.h"
#include "test_ops_gradcheck.h"

namespace test_model {

using namespace mgpu;
using gradcheck::check;
using gradcheck::fill_randn;
using gradcheck::random_ids;
using model_gradcheck::check_block;
using model_gradcheck::check_model;
using model_gradcheck::perturb;
using model_gradcheck::require_close;

namespace {
GPTConfig tiny_config() {
  GPTConfig cfg;
  cfg.vocab = 11;
  cfg.seq_len = 6;
  cfg.layers = 2;
  cfg.dim = 8;
  cfg.heads = 2;
  cfg.seed = 5;
  return cfg;
}

}  // namespace

TEST_CASE("bad configs are rejected with a one-line reason", "[model]") {
  GPTConfig cfg;
  cfg.dim = 64;
  cfg.heads = 3;
  REQUIRE_THROWS_WITH(cfg.validate(),
                      "GPT config: heads (3) must divide dim (64): try heads 1, 2, 4, 8, 16");
  REQUIRE_THROWS_AS(GPT(cfg), std::invalid_argument);
  cfg.heads = 4;
  cfg.layers = 0;
  REQUIRE_THROWS_WITH(cfg.validate(), Catch::Contains("layers (0) must be positive"));
  cfg.layers = 2;
  cfg.vocab = -1;
  REQUIRE_THROWS_WITH(cfg.validate(), Catch::Contains("vocab (-1) must be positive"));
  cfg.vocab = 64;
  REQUIRE_NOTHROW(cfg.validate());
  GPT model(tiny_config());
  std::vector<int32_t> ids(3 * 7, 0);
  REQUIRE_THROWS_WITH(model.forward_backward(ids, ids, 3, 7), Catch::Contains("seq_len = 6"));
}

TEST_CASE("params come in forward order with their names and init", "[model]") {
  GPT model(tiny_config());
  ParamList params = model.params();
  REQUIRE(params.front()->name == "embedding.wte");
  REQUIRE(params[2]->name == "blocks.0.ln1.weight");
  REQUIRE(params[4]->name == "blocks.0.attn.qkv.weight");
  REQUIRE(params.back()->name == "head.lm_head.weight");
  const int64_t c = 8, v = 11, t = 6, l = 2;
  const int64_t per_block =
      2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + (4 * c * c + c);
  REQUIRE(model.num_params() == v * c + t * c + l * per_block + 2 * c + v * c);
  REQUIRE(model.blocks[1].ln2.weight.data.to_vector()[3] == 1.0f);
  REQUIRE(model.blocks[1].ln2.bias.data.to_vector()[3] == 0.0f);
  // residual projections are drawn with a smaller std than the others
  auto stddev = [](const Tensor& t) {
    double s = 0;
    for (float x : t.to_vector()) s += double(x) * x;
    return std::sqrt(s / double(t.numel()));
  };
  GPTConfig big = tiny_config();
  big.dim = 64;
  big.layers = 8;
  GPT wide(big);
  REQUIRE(stddev(wide.blocks[0].fc.weight.data) == Approx(0.02).epsilon(0.05));
  REQUIRE(stddev(wide.blocks[0].mlp_proj.weight.data) == Approx(0.02 / 4.0).epsilon(0.05));
}

TEST_CASE("same seed gives bit-identical losses, another seed differs", "[model]") {
  GPTConfig cfg = tiny_config();
  const int64_t b = 3, t = 6;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 1);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 2);
  GPT m1(cfg), m2(cfg);
  for (int i = 0; i < 3; i++) {
    float l1 = m1.forward_backward(tokens, targets, b, t);
    float l2 = m2.forward_backward(tokens, targets, b, t);
    REQUIRE(l1 == l2);  // bit for bit
  }
  REQUIRE(m1.params()[5]->grad.to_vector() == m2.params()[5]->grad.to_vector());
  cfg.seed = 6;
  GPT m3(cfg);
  REQUIRE(m3.forward_backward(tokens, targets, b, t) != m1.forward_backward(tokens, targets, b, t));
  // an untrained model predicts about uniformly: loss near log(vocab)
  REQUIRE(m3.loss(tokens, targets, b, t) == Approx(std::log(11.0)).epsilon(0.05));
}

TEST_CASE("Block backward: input and every parameter", "[model][gradcheck]") {
  check_block(tiny_config(), 0);
}

TEST_CASE("Head backward: input and every parameter", "[model][gradcheck]") {
  GPTConfig cfg = tiny_config();
  Head head(cfg);
  ParamList params;
  head.collect(params);
  materialise(params, /*seed=*/1, cfg.dtype);
  for (size_t i = 0; i < params.size(); i++) perturb(*params[i], 200 + i);
  const int64_t b = 2, t = 5, c = cfg.dim;
  Tensor x = Tensor::zeros({b, t, c}, MemCategory::activations);
  fill_randn(x, 9);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 3);
  HeadActivations acts = HeadActivations::allocate(cfg, b, t);
  auto loss = [&] { return double(head.forward_loss(x, targets, acts)); };
  loss();
  Tensor dx = Tensor::zeros({b, t, c}, MemCategory::workspace);
  head.backward(dx, acts);
  require_close(check(x, dx.to_vector(), loss), "head dx");
  for (Param* p : params) require_close(check(p->data, p->grad.to_vector(), loss), p->name);
}

TEST_CASE("whole model: every parameter's gradient matches finite differences",
          "[model][gradcheck]") {
  GPTConfig cfg = tiny_config();
  // Tied, wte's gradient is the embedding's plus the head's.
  cfg.tie_embeddings = GENERATE(false, true);
  INFO("tie_embeddings " << cfg.tie_embeddings);
  GPT model(cfg);
  check_model(model);
}

TEST_CASE("gradients accumulate until zero_grad", "[model]") {
  GPTConfig cfg = tiny_config();
  GPT model(cfg);
  const int64_t b = 2, t = 4;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 1);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 2);
  Param& w = model.blocks[0].qkv.weight;
  model.forward_backward(tokens, targets, b, t);
  auto once = w.grad.to_vector();
  model.forward_backward(tokens, targets, b, t);
  auto twice = w.grad.to_vector();
  for (size_t i = 0; i < once.size(); i += 7) REQUIRE(twice[i] == Approx(2 * once[i]));
  model.zero_grad();
  REQUIRE(w.grad.to_vector() == std::vector<float>(once.size(), 0.0f));
  // two half-scaled micro-batches = one full one
  model.forward_backward(tokens, targets, b, t, 0.5f);
  model.forward_backward(tokens, targets, b, t, 0.5f);
  auto halves = w.grad.to_vector();
  for (size_t i = 0; i < once.size(); i += 7) REQUIRE(halves[i] == Approx(once[i]));
}

TEST_CASE("a few SGD steps lower the loss on a fixed batch", "[model]") {
  GPTConfig cfg = tiny_config();
  GPT model(cfg);
  const int64_t b = 4, t = 6;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 1);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 2);
  float first = 0, last = 0;
  for (int step = 0; step < 30; step++) {
    model.zero_grad();
    last = model.forward_backward(tokens, targets, b, t);
    if (step == 0) first = last;
    for (Param* p : model.params()) ops::axpy(p->data, -0.5f, p->grad);
  }
  REQUIRE(last < first - 0.3f);
}

TEST_CASE("activations are tagged as activations", "[model]") {
  GPTConfig cfg = tiny_config();
  GPT model(cfg);
  Allocator& alloc = current_rank().allocator;
  const int64_t before = alloc.stats().current[int(MemCategory::activations)];
  {
    GPTActivations acts = GPTActivations::allocate(cfg, 2, 6);
    const int64_t held = alloc.stats().current[int(MemCategory::activations)] - before;
    REQUIRE(held >= acts.blocks[0].bytes() * cfg.layers);
  }
  REQUIRE(alloc.stats().current[int(MemCategory::activations)] == before);
}

TEST_CASE("phantom GPT: a step costs time and reports its FLOPs, with no data",
          "[model][phantom]") {
  HardwareProfile profile;
  profile.peak_flops = 1e12;
  profile.mem_bandwidth = 1e12;
  RankContext ctx(0, 1, Device::phantom(), profile, ClockKind::modeled);
  ScopedRank guard(ctx);
  GPTConfig cfg;
  cfg.vocab = 256;
  cfg.seq_len = 128;
  cfg.layers = 4;
  cfg.dim = 256;
  cfg.heads = 8;
  GPT model(cfg);
  REQUIRE_FALSE(model.params()[0]->data.has_data());
  const int64_t b = 4, t = 128;
  std::vector<int32_t> ids(size_t(b * t), 1);
  REQUIRE(model.forward_backward(ids, ids, b, t) == 0.0f);
  double flops = 0;
  for (const auto& e : ctx.tracer.events()) flops += e.flops;
  const double estimate = model.flops_per_token(t) * double(b * t);
  INFO("recorded " << flops << " estimate " << estimate);
  // the estimate counts full T x T attention and no elementwise work: same ballpark
  REQUIRE(flops > 0.7 * estimate);
  REQUIRE(flops < 1.3 * estimate);
  REQUIRE(ctx.clock.compute_now() > 0);
}

TEST_CASE("ranks as threads: concurrent models give the single-thread result", "[model]") {
  GPTConfig cfg = tiny_config();
  const int64_t b = 2, t = 6;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 1);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 2);
  float expected = 0;
  {
    GPT model(cfg);
    for (int i = 0; i < 5; i++) expected = model.forward_backward(tokens, targets, b, t);
  }
  std::vector<float> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; r++)
    ranks.emplace_back([&, r] {
      RankContext ctx(r, 2, Device::cpu(r), HardwareProfile::ideal(), ClockKind::modeled);
      ScopedRank guard(ctx);
      GPT model(cfg);
      for (int i = 0; i < 5; i++) got[size_t(r)] = model.forward_backward(tokens, targets, b, t);
    });
  for (auto& th : ranks) th.join();
  REQUIRE(got[0] == expected);
  REQUIRE(got[1] == expected);
}

TEST_CASE("tied embeddings: the head reads wte, which is listed and counted once", "[model]") {
  GPTConfig cfg = tiny_config();
  cfg.tie_embeddings = true;
  GPT model(cfg);
  ParamList params = model.params();
  REQUIRE(params.back()->name == "head.ln_f.bias");  // no lm_head of its own
  REQUIRE(std::count_if(params.begin(), params.end(),
                        [](Param* p) { return p->name == "embedding.wte"; }) == 1);
  REQUIRE(&model.head.output_weight() == &model.embedding.wte);
  GPTConfig untied = tiny_config();
  REQUIRE(model.num_params() == GPT(untied).num_params() - int64_t{11} * 8);
  REQUIRE(model.num_params() == theory::gpt_parameters(cfg));
  // Same seed: the untied model's wte is the tied one's, its head a second matrix.
  const int64_t b = 2, t = 5;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 4);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 5);
  GPT other(untied);
  REQUIRE(other.embedding.wte.data.to_vector() == model.embedding.wte.data.to_vector());
  REQUIRE(other.loss(tokens, targets, b, t) != model.loss(tokens, targets, b, t));
  // Hand-tied: the untied model with its head set to wte computes the tied model's loss, and the
  // tied wte's gradient is the sum of the untied wte's and head's.
  other.head.lm_head.weight.data.copy_from(other.embedding.wte.data);
  model.zero_grad();
  other.zero_grad();
  REQUIRE(other.forward_backward(tokens, targets, b, t) ==
          model.forward_backward(tokens, targets, b, t));
  const auto tied = model.embedding.wte.grad.to_vector();
  const auto emb = other.embedding.wte.grad.to_vector();
  const auto head = other.head.lm_head.weight.grad.to_vector();
  for (size_t i = 0; i < tied.size(); i++) REQUIRE(tied[i] == Approx(emb[i] + head[i]));
}

}  // namespace test_model

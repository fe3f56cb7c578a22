// The mixture-of-experts layer (core/model/moe.h): one expert with top-1 is the dense MLP bit for
// bit; the backward matches finite differences (dropless and with drops, the aux loss included);
// the aux loss, the capacity rule and the reference routing equal hand computations; gradient
// accumulation over micro-batches equals one batch; the parameter counts equal the formulas; the
// permutation ops and their row math (core/ops/math/rows.h, shared with the CUDA kernels).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/model/gpt.h"
#include "core/model/init.h"
#include "core/ops/math/rows.h"
#include "core/ops/ops.h"
#include "core/theory/model_states.h"
#include "exercises/exercises.h"
#include "test_ops_gradcheck.h"

namespace test_moe {

using namespace mgpu;
using gradcheck::project;
using gradcheck::randn;
using gradcheck::random_ids;

namespace {

GPTConfig moe_config(int experts, int top_k, double capacity_factor = 0.0) {
  GPTConfig cfg;
  cfg.vocab = 11;
  cfg.seq_len = 6;
  cfg.layers = 2;
  cfg.dim = 8;
  cfg.heads = 2;
  cfg.seed = 5;
  cfg.experts = experts;
  cfg.top_k = top_k;
  cfg.capacity_factor = capacity_factor;
  cfg.expert_hidden = 12;
  cfg.route = &reference::route_tokens;
  return cfg;
}

// Routes `probs` ([tokens, experts]) with the reference.
Routing route(const std::vector<float>& probs, int64_t tokens, int64_t group, int experts,
              int top_k, int64_t capacity, int ranks = 1) {
  return reference::route_tokens({.probs = probs,
                                  .tokens = tokens,
                                  .group_tokens = group,
                                  .experts = experts,
                                  .top_k = top_k,
                                  .capacity = capacity,
                                  .ranks = ranks});
}

void add_noise(Param& p, uint64_t seed, float stddev) {
  const std::vector<float> noise = randn(size_t(p.data.numel()), seed, stddev);
  float* d = p.data.f32();
  for (size_t i = 0; i < noise.size(); ++i) d[i] += noise[i];
}

}  // namespace

TEST_CASE("MoE config: each bad size is one line saying what would work", "[moe]") {
  GPTConfig cfg = moe_config(4, 2);
  REQUIRE_NOTHROW(cfg.validate());
  auto says = [](GPTConfig c, const std::string& what) {
    REQUIRE_THROWS_WITH(c.validate(), Catch::Contains(what));
  };
  GPTConfig c = cfg;
  c.experts = -1;
  says(c, "experts (-1) must be >= 0");
  c = cfg;
  c.top_k = 5;
  says(c, "top_k (5) must be at most experts (4): try top_k 2");
  c.top_k = 0;
  says(c, "top_k (0) must be at least 1");
  c = cfg;
  c.capacity_factor = -0.5;
  says(c, "capacity_factor (-0.5) must be from 0 (dropless) to 1e+06");
  c.capacity_factor = 1e18;  // an expert's capacity would overflow its token count
  says(c, "capacity_factor (1e+18) must be from 0 (dropless) to 1e+06");
  c = cfg;
  c.moe_every = 0;
  says(c, "moe_every (0) must be at least 1");
  c.moe_every = c.layers + 1;
  says(c, fmt::format("moe_every ({}) is above the {} layers", c.layers + 1, c.layers));
  c = cfg;
  c.aux_loss_coef = 1e30f;
  says(c, "must be from 0 to 1000");
  // a model with experts and no routing function says what is missing when it first routes
  c = cfg;
  c.route = nullptr;
  GPT no_route(c);
  const std::vector<int32_t> t = random_ids(6, c.vocab, 1);
  REQUIRE_THROWS_WITH(
      no_route.forward_backward(t, t, 1, 6),
      Catch::Contains("no routing function") && Catch::Contains("ex::selected_seams().moe.route"));
}

TEST_CASE("MoE blocks: which blocks, their tensors and the parameter counts", "[moe]") {
  GPTConfig cfg = moe_config(4, 2);
  cfg.layers = 4;
  cfg.moe_every = 2;  // blocks 1 and 3
  GPT model(cfg);
  CHECK(!model.blocks[0].is_moe());
  CHECK(model.blocks[1].is_moe());
  CHECK(!model.blocks[2].is_moe());
  CHECK(model.blocks[3].is_moe());
  const MoeLayer& moe = model.blocks[3].moe;
  CHECK(moe.router.name == "blocks.3.moe.router.weight");
  CHECK(moe.router.shape == Shape{4, 8});
  CHECK(moe.fc_weight.shape == Shape{4, 12, 8});
  CHECK(moe.fc_bias.shape == Shape{4, 12});
  CHECK(moe.proj_weight.shape == Shape{4, 8, 12});
  CHECK(moe.proj_bias.shape == Shape{4, 8});
  CHECK(model.num_params() == theory::gpt_parameters(cfg));
  // one token uses the router and 2 of the 4 experts of each MoE block
  const int64_t expert = 2 * 12 * 8 + 12 + 8;
  CHECK(theory::gpt_active_parameters(cfg) == theory::gpt_parameters(cfg) - 2 * 2 * expert);
  CHECK(model.active_params() == theory::gpt_active_parameters(cfg));
  CHECK(model.flops_per_token(6) ==
        theory::training_flops_per_token(model.active_params(), cfg.layers, 6, cfg.dim));
}

TEST_CASE("one expert with top-1 is the dense MLP, bit for bit", "[moe]") {
  GPTConfig dense_cfg = moe_config(0, 1);
  dense_cfg.expert_hidden = 0;
  GPTConfig moe_cfg = moe_config(1, 1);
  moe_cfg.expert_hidden = 0;  // 4C, the dense MLP's width
  moe_cfg.aux_loss_coef = 0;  // one expert: nothing to balance
  GPT dense(dense_cfg), moe(moe_cfg);
  for (size_t i = 0; i < dense.blocks.size(); ++i) {
    Block& d = dense.blocks[i];
    MoeLayer& m = moe.blocks[i].moe;
    REQUIRE(moe.blocks[i].is_moe());
    m.fc_weight.data.copy_from(d.fc.weight.data);
    m.fc_bias.data.copy_from(d.fc.bias.data);
    m.proj_weight.data.copy_from(d.mlp_proj.weight.data);
    m.proj_bias.data.copy_from(d.mlp_proj.bias.data);
  }
  const std::vector<int32_t> tokens = random_ids(18, 11, 1), targets = random_ids(18, 11, 2);
  const float dense_loss = dense.forward_backward(tokens, targets, 3, 6);
  const float moe_loss = moe.forward_backward(tokens, targets, 3, 6);
  CHECK(moe_loss == dense_loss);
  // every shared parameter's gradient is identical, and the experts' equal the MLP's
  for (size_t i = 0; i < dense.blocks.size(); ++i) {
    Block& d = dense.blocks[i];
    const MoeLayer& m = moe.blocks[i].moe;
    CHECK(m.fc_weight.grad.to_vector() == d.fc.weight.grad.to_vector());
    CHECK(m.fc_bias.grad.to_vector() == d.fc.bias.grad.to_vector());
    CHECK(m.proj_weight.grad.to_vector() == d.mlp_proj.weight.grad.to_vector());
    CHECK(m.proj_bias.grad.to_vector() == d.mlp_proj.bias.grad.to_vector());
    CHECK(moe.blocks[i].qkv.weight.grad.to_vector() == d.qkv.weight.grad.to_vector());
  }
  CHECK(moe.embedding.wte.grad.to_vector() == dense.embedding.wte.grad.to_vector());
}

namespace {
// A block's input, router and experts against finite differences: loss = <out, r> + aux loss
// (the block's loss gradient scale is 1, so the backward adds the aux loss's gradient as is).
void check_block_gradients(const GPTConfig& cfg, int64_t least_dropped) {
  Block block(cfg, 1);
  REQUIRE(block.is_moe());
  ParamList params;
  block.collect(params);
  materialise(params, /*seed=*/3, cfg.dtype);
  uint64_t seed = 10;
  for (Param* p : params) add_noise(*p, seed++, 0.3f);  // O(1) gradients on every path
  const int64_t b = 2, t = 6, c = cfg.dim;
  Tensor x = Tensor::from({b, t, c}, randn(size_t(b * t * c), 7));
  const std::vector<float> r = randn(size_t(b * t * c), 8);
  auto loss = [&] {
    BlockActivations a = BlockActivations::allocate(cfg, b, t);
    block.forward(x, a);
    return project(a.out, r) + double(block.moe.last.aux_loss);
  };
  BlockActivations a = BlockActivations::allocate(cfg, b, t);
  block.forward(x, a);
  CHECK(block.moe.last.dropped >= least_dropped);
  if (least_dropped == 0) CHECK(block.moe.last.dropped == 0);
  CHECK(block.moe.last.aux_loss > 0.0f);
  Tensor dout = Tensor::from({b, t, c}, r);
  Tensor dx = Tensor::zeros({b, t, c}, MemCategory::workspace);
  block.backward(dx, dout, a);
  {
    INFO("input");
    const gradcheck::Result res = gradcheck::check(x, dx.to_vector(), loss, 1e-3f);
    CHECK(res.numeric_norm > 0);
    CHECK(res.rel_error < 1e-2);
  }
  for (Param* p : {&block.moe.router, &block.moe.fc_weight, &block.moe.fc_bias,
                   &block.moe.proj_weight, &block.moe.proj_bias}) {
    INFO(p->name);
    const gradcheck::Result res = gradcheck::check(p->data, p->grad.to_vector(), loss, 1e-3f);
    CHECK(res.numeric_norm > 0);
    CHECK(res.rel_error < 1e-2);
  }
}
}  // namespace

TEST_CASE("MoE block backward matches finite differences, dropless", "[moe][gradcheck]") {
  GPTConfig cfg = moe_config(4, 2);
  cfg.aux_loss_coef = 0.5f;  // large enough that a missing aux gradient shows
  check_block_gradients(cfg, 0);
}

TEST_CASE("MoE block backward matches finite differences with dropped tokens", "[moe][gradcheck]") {
  // capacity ceil(0.5 x 6 x 2 / 4) = 2 slots per expert per sequence: of a sequence's 12 slots at
  // most 8 are kept, so at least 4 of each of the 2 sequences are dropped
  GPTConfig cfg = moe_config(4, 2, /*capacity_factor=*/0.5);
  cfg.aux_loss_coef = 0.5f;
  REQUIRE(expert_capacity(0.5, 6, 2, 4) == 2);
  check_block_gradients(cfg, 8);
}

TEST_CASE("the aux loss equals a hand computation", "[moe]") {
  // 2 groups of 2 tokens, 2 experts, top-1.
  //   group 0: [0.7 0.3] [0.6 0.4] both choose expert 0: f = (1, 0), P = (0.65, 0.35) -> 2 x 0.65
  //   group 1: [0.2 0.8] [0.6 0.4] choose 1 and 0:       f = (.5, .5), P = (0.4, 0.6) -> 2 x 0.5
  // mean (1.3 + 1.0) / 2 = 1.15, times the coefficient 0.01
  const std::vector<float> probs = {0.7f, 0.3f, 0.6f, 0.4f, 0.2f, 0.8f, 0.6f, 0.4f};
  const Routing r = route(probs, 4, 2, 2, 1, 0);
  CHECK(moe_aux_loss(probs, r, 2, 2, 1, 0.01f) == Approx(0.0115).epsilon(1e-6));
  // its gradient: coef x E x f_e / (T x groups) at each probability of e in the group
  std::vector<float> d(8, 0.0f);
  moe_aux_loss_grad(d, r, 2, 2, 1, 0.01f);
  const std::vector<float> expected = {0.01f * 2 * 1.0f / 4, 0.0f,
                                       0.01f * 2 * 1.0f / 4, 0.0f,
                                       0.01f * 2 * 0.5f / 4, 0.01f * 2 * 0.5f / 4,
                                       0.01f * 2 * 0.5f / 4, 0.01f * 2 * 0.5f / 4};
  for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == Approx(expected[i]));
}

TEST_CASE("dropped tokens follow the capacity rule, and their MoE output is zero", "[moe]") {
  // Every token of one sequence prefers expert 0 (top-1): capacity ceil(1.0 x 4 x 1 / 2) = 2
  // keeps tokens 0 and 1 and drops 2 and 3.
  REQUIRE(expert_capacity(1.0, 4, 1, 2) == 2);
  REQUIRE(expert_capacity(0.0, 4, 1, 2) == 0);   // dropless
  REQUIRE(expert_capacity(1.25, 6, 2, 4) == 4);  // ceil(3.75)
  const std::vector<float> probs = {0.9f, 0.1f, 0.8f, 0.2f, 0.7f, 0.3f, 0.6f, 0.4f};
  const Routing r = route(probs, 4, 4, 2, 1, 2);
  CHECK(r.dropped == 2);
  CHECK(r.position == std::vector<int32_t>{0, 1, -1, -1});
  CHECK(r.tokens_per_expert == std::vector<int64_t>{2, 0});
  // through the layer: a router whose weights send every token to expert 0
  GPTConfig cfg = moe_config(2, 1, 1.0);
  cfg.layers = 1;
  cfg.seq_len = 4;
  Block block(cfg, 0);
  ParamList params;
  block.collect(params);
  materialise(params, 3, cfg.dtype);
  std::vector<float> router(16, 0.0f);
  for (int c = 0; c < 8; ++c) router[size_t(c)] = 1.0f;  // expert 0's logit = sum of the input
  block.moe.router.data.write_f32(router.data(), 16);
  Tensor x = Tensor::from({1, 4, 8}, std::vector<float>(32, 0.5f));
  Tensor out = Tensor::zeros({1, 4, 8}, MemCategory::workspace);
  MoeActivations acts;
  block.moe.forward(out, x, acts, BlockComm{});
  CHECK(block.moe.last.dropped == 2);
  CHECK(block.moe.last.tokens_per_expert == std::vector<int64_t>{2, 0});
  const std::vector<float> y = out.to_vector();
  for (int t = 0; t < 4; ++t) {
    float norm = 0.0f;
    for (int c = 0; c < 8; ++c) norm += std::abs(y[size_t(t * 8 + c)]);
    INFO("token " << t);
    CHECK((t < 2 ? norm > 0.0f : norm == 0.0f));
  }
}

TEST_CASE("reference routing: ties, capacity priority, dispatch order, send counts", "[moe]") {
  SECTION("a tie goes to the lower expert; weights renormalised over the top-k") {
    const Routing r = route({0.25f, 0.25f, 0.25f, 0.25f}, 1, 1, 4, 2, 0);
    CHECK(r.expert == std::vector<int32_t>{0, 1});
    CHECK(r.weight == std::vector<float>{0.5f, 0.5f});
    const Routing s = route({0.1f, 0.3f, 0.2f, 0.4f}, 1, 1, 4, 2, 0);
    CHECK(s.expert == std::vector<int32_t>{3, 1});
    CHECK(s.weight[0] == Approx(0.4 / 0.7));
    CHECK(s.weight[1] == Approx(0.3 / 0.7));
  }
  SECTION("capacity keeps every first choice before any second, earlier tokens first") {
    // token 0: 1 then 0; token 1: 0 then 2; token 2: 0 then 1. Capacity 1: expert 0 keeps
    // token 1's first choice (choice 0 comes first) and drops tokens 2's first and 0's second.
    const std::vector<float> probs = {0.3f, 0.6f, 0.1f, 0.6f, 0.1f, 0.3f, 0.7f, 0.2f, 0.1f};
    const Routing r = route(probs, 3, 3, 3, 2, 1);
    CHECK(r.expert == std::vector<int32_t>{1, 0, 0, 2, 0, 1});
    // slots: (t0,c0)->1 kept, (t0,c1)->0 dropped, (t1,c0)->0 kept, (t1,c1)->2 kept,
    //        (t2,c0)->0 dropped, (t2,c1)->1 dropped (expert 1 is full from t0's first choice)
    CHECK(r.dropped == 3);
    // dispatch order by expert, then slot: expert 0: slot 2; expert 1: slot 0; expert 2: slot 3
    CHECK(r.order == std::vector<int32_t>{2, 0, 3});
    CHECK(r.position == std::vector<int32_t>{1, -1, 0, 2, -1, -1});
    CHECK(r.tokens_per_expert == std::vector<int64_t>{1, 1, 1});
  }
  SECTION("capacity is per group") {
    const std::vector<float> probs = {0.9f, 0.1f, 0.8f, 0.2f, 0.9f, 0.1f, 0.8f, 0.2f};
    const Routing r = route(probs, 4, 2, 2, 1, 1);  // 2 groups of 2, each keeps 1 on expert 0
    CHECK(r.position == std::vector<int32_t>{0, -1, 1, -1});
    CHECK(r.dropped == 2);
  }
  SECTION("send counts: the kept slots bound for each rank's experts") {
    // 4 experts over 2 ranks: rank 0 holds experts 0-1, rank 1 experts 2-3
    const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f, 0.4f, 0.3f,
                                      0.2f, 0.1f, 0.1f, 0.4f, 0.3f, 0.2f};
    const Routing r = route(probs, 3, 3, 4, 2, 0, 2);
    // choices: t0 -> 3, 2; t1 -> 0, 1; t2 -> 1, 2
    CHECK(r.expert == std::vector<int32_t>{3, 2, 0, 1, 1, 2});
    CHECK(r.tokens_per_expert == std::vector<int64_t>{1, 2, 2, 1});
    CHECK(r.send_counts == std::vector<int64_t>{3, 3});
    CHECK(r.order == std::vector<int32_t>{2, 3, 4, 1, 5, 0});
  }
}

TEST_CASE("balanced routing spreads every token's choices evenly", "[moe]") {
  const RouteQuery q{.tokens = 8, .group_tokens = 4, .experts = 4, .top_k = 2, .ranks = 2};
  const Routing r = balanced_routing(q);
  CHECK(r.tokens_per_expert == std::vector<int64_t>{4, 4, 4, 4});
  CHECK(r.send_counts == std::vector<int64_t>{8, 8});
  CHECK(r.dropped == 0);
  CHECK(r.expert[0] != r.expert[1]);  // a token's choices are distinct
  for (size_t i = 0; i < r.order.size(); ++i) CHECK(r.position[size_t(r.order[i])] == int32_t(i));
}

TEST_CASE("two micro-batches accumulate the gradients of one batch, the aux loss's too", "[moe]") {
  GPTConfig cfg = moe_config(4, 2, 1.0);
  cfg.aux_loss_coef = 0.5f;  // large, so a missing 1/micro-batches scale shows
  const std::vector<int32_t> tokens = random_ids(24, 11, 3), targets = random_ids(24, 11, 4);
  GPT whole(cfg), halves(cfg);
  whole.forward_backward(tokens, targets, 4, 6);
  const std::span<const int32_t> tk(tokens), tg(targets);
  halves.forward_backward(tk.subspan(0, 12), tg.subspan(0, 12), 2, 6, 0.5f);
  halves.forward_backward(tk.subspan(12), tg.subspan(12), 2, 6, 0.5f);
  const ParamList a = whole.params(), b = halves.params();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i]->name);
    const std::vector<float> ga = a[i]->grad.to_vector(), gb = b[i]->grad.to_vector();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < ga.size(); ++j) {
      diff = std::max(diff, double(std::abs(ga[j] - gb[j])));
      norm = std::max(norm, double(std::abs(ga[j])));
    }
    CHECK(diff <= 1e-5 * std::max(norm, 1.0));  // fp32 rounding of a different summation order
  }
}

TEST_CASE("the permutation ops: gather, weighted combine, gathered dots", "[moe][ops]") {
  const Tensor table = Tensor::from({3, 2}, {1, 2, 3, 4, 5, 6});
  const std::vector<int32_t> index = {2, 0, 2};
  Tensor rows = Tensor::zeros({3, 2}, MemCategory::workspace);
  ops::gather_rows(rows, table, index, std::vector<float>{1.0f, 2.0f, 0.5f});
  CHECK(rows.to_vector() == std::vector<float>{5, 6, 2, 4, 2.5f, 3});
  Tensor out = Tensor::from({3, 2}, {9, 9, 9, 9, 9, 9});  // overwritten: untouched rows are 0
  ops::combine_rows(out, rows, index, std::vector<float>{1.0f, 1.0f, 2.0f});
  CHECK(out.to_vector() == std::vector<float>{2, 4, 0, 0, 10, 12});
  std::vector<float> dots(3);
  ops::gathered_row_dots(dots, table, index, rows);
  CHECK(dots == std::vector<float>{5 * 5 + 6 * 6, 1 * 2 + 2 * 4, 5 * 2.5f + 6 * 3});
  // bf16 rows: computed in fp32, each stored element rounded once
  Tensor rows16 = Tensor::zeros({3, 2}, MemCategory::workspace, DType::bf16);
  ops::gather_rows(rows16, table, index);
  CHECK(rows16.to_vector() == std::vector<float>{5, 6, 1, 2, 5, 6});
  const std::vector<int32_t> outside = {3, 0, 0};
  CHECK_THROWS_WITH(ops::gather_rows(rows, table, outside),
                    Catch::Contains("row index 3 is outside [0, 3)"));
}

TEST_CASE("combine adds each output row's slots in ascending order, as the GPU does",
          "[moe][ops]") {
  // Float addition is not associative: 1e8 + 1 rounds back to 1e8. Three slots land on row 0:
  // in ascending order (0 + 1e8) + 1 - 1e8 is 0, while adding the 1 last (1e8 - 1e8 + 1, as
  // atomics might) gives 1. The CUDA kernel (core/ops/cuda/moe_rows.cu) adds in this order too,
  // without atomics, so a GPU run combines to the same bits on every run.
  const Tensor rows = Tensor::from({4, 1}, {1e8f, 1.0f, 7.0f, -1e8f});
  const std::vector<int32_t> index = {0, 0, 1, 0};
  Tensor out = Tensor::zeros({2, 1}, MemCategory::workspace);
  ops::combine_rows(out, rows, index);
  CHECK(out.to_vector() == std::vector<float>{0.0f, 7.0f});
  // the same with scales: each product is rounded, then added in slot order
  ops::combine_rows(out, rows, index, std::vector<float>{1.0f, 2.0f, 0.5f, 1.0f});
  CHECK(out.to_vector() == std::vector<float>{0.0f, 3.5f});
}

TEST_CASE("the permutation's row math: dot in ascending order, a missing scale is 1",
          "[moe][ops]") {
  const float a[3] = {1e8f, 1.0f, -1e8f}, ones[3] = {1.0f, 1.0f, 1.0f};
  CHECK(math::dot(a, ones, 3) == 0.0f);  // (1e8 + 1) rounds to 1e8 first
  const float x[4] = {0.5f, -2.0f, 3.0f, 0.25f}, y[4] = {4.0f, 1.5f, -1.0f, 8.0f};
  CHECK(math::dot(x, y, 4) == Approx(0.5 * 4 - 2 * 1.5 - 3 + 0.25 * 8).epsilon(1e-7));
  CHECK(math::dot(x, y, 0) == 0.0f);
  const float scale[2] = {0.5f, 3.0f};
  CHECK(math::row_scale(scale, 1) == 3.0f);
  CHECK(math::row_scale(nullptr, 1) == 1.0f);
}

TEST_CASE("combine through per-row slot lists (the GPU's way) gives the CPU kernel's bits",
          "[moe][ops]") {
  // moe_rows.cu: the host lists each output row's slots (slots_by_row), then one thread per
  // output element adds its row's slots in list order (combined_value). Replayed here on the CPU.
  const int64_t out_rows = 7, n = 17, c = 5;
  std::vector<int32_t> index(static_cast<size_t>(n));  // repeats, and rows 5 and 6 get no slot
  for (int64_t i = 0; i < n; ++i) index[size_t(i)] = int32_t((i * 3 + i / 4) % 5);
  std::vector<int32_t> begin(static_cast<size_t>(out_rows + 1)), slots(static_cast<size_t>(n));
  math::slots_by_row(index.data(), n, out_rows, begin.data(), slots.data());
  CHECK(begin.front() == 0);
  CHECK(begin.back() == n);
  for (int64_t r = 0; r < out_rows; ++r) {
    INFO("row " << r);
    for (int32_t k = begin[size_t(r)]; k < begin[size_t(r) + 1]; ++k) {
      CHECK(index[size_t(slots[size_t(k)])] == r);  // the row's own slots ...
      if (k > begin[size_t(r)]) CHECK(slots[size_t(k)] > slots[size_t(k) - 1]);  // ... ascending
    }
  }
  CHECK(begin[5] == begin[7]);  // the rows no slot lands on have empty lists

  std::vector<float> row_values(static_cast<size_t>(n * c)), scale(static_cast<size_t>(n));
  for (size_t k = 0; k < row_values.size(); ++k) row_values[k] = std::sin(0.7f * float(k)) * 1e3f;
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.1f + 0.37f * float(i % 4);
  const Tensor rows = Tensor::from({n, c}, row_values);
  for (bool scaled : {false, true}) {
    INFO((scaled ? "with scales" : "without scales"));
    const float* s = scaled ? scale.data() : nullptr;
    Tensor out = Tensor::zeros({out_rows, c}, MemCategory::workspace);
    ops::combine_rows(out, rows, index, scaled ? scale : std::vector<float>{});
    std::vector<float> listed(size_t(out_rows * c));
    for (int64_t e = 0; e < out_rows * c; ++e) {
      const int64_t r = e / c;
      listed[size_t(e)] = math::combined_value(row_values.data(), c, e % c, slots.data(),
                                               begin[size_t(r)], begin[size_t(r) + 1], s);
    }
    const std::vector<float> want = out.to_vector();
    CHECK(std::memcmp(listed.data(), want.data(), listed.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("MoE under recompute: every mode gives the same gradients; what it keeps is tagged",
          "[moe]") {
  const std::vector<int32_t> tokens = random_ids(18, 11, 5), targets = random_ids(18, 11, 6);
  std::vector<std::vector<float>> grads;
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    GPTConfig cfg = moe_config(4, 2, 1.0);
    cfg.recompute = mode;
    GPT model(cfg);
    GPTActivations acts = GPTActivations::allocate(cfg, 3, 6);
    model.forward(tokens, targets, acts);
    const MoeActivations& kept = acts.blocks[0].moe;
    // full recompute keeps only the block's input and output; the others keep the MoE's
    CHECK(kept.probs.defined() == (mode != Recompute::full));
    if (kept.probs.defined()) {
      CHECK(kept.probs.category() == MemCategory::activations);
      CHECK(kept.probs.dtype() == DType::f32);
      CHECK(kept.expert_rows.category() == MemCategory::activations);
      CHECK(kept.fc.category() == MemCategory::activations);
      CHECK(acts.blocks[0].bytes() > acts.blocks[0].out.bytes());
    }
    model.backward(tokens, acts);
    grads.push_back(model.blocks[0].moe.router.grad.to_vector());
    const std::vector<float> fc = model.blocks[1].moe.fc_weight.grad.to_vector();
    grads.back().insert(grads.back().end(), fc.begin(), fc.end());
  }
  CHECK(grads[1] == grads[0]);  // bit for bit: the routing is recomputed exactly
  CHECK(grads[2] == grads[0]);
}

namespace {
// An exchange on one rank through the ExpertComm interface (what a layout hands a block): the
// plan sends each expert's rows to itself and the exchanges copy, so the layer's exchange path
// (comm buffers, the four exchanges) must give the null comm's result bit for bit.
class CopyingExpertComm : public ExpertComm {
 public:
  int ranks() const override { return 1; }
  int rank() const override { return 0; }
  ExchangePlan plan(const Routing& routing, int experts, const ExchangeSite&) override {
    ++plans;
    return {.ranks = 1,
            .local_experts = experts,
            .send = routing.tokens_per_expert,
            .recv = routing.tokens_per_expert};
  }
  void to_experts(const Tensor& rows, Tensor& expert_rows, const ExchangePlan&,
                  const ExchangeSite&) override {
    ++exchanges;
    expert_rows.copy_from(rows);
  }
  void to_tokens(const Tensor& expert_rows, Tensor& rows, const ExchangePlan&,
                 const ExchangeSite&) override {
    ++exchanges;
    rows.copy_from(expert_rows);
  }
  int plans = 0, exchanges = 0;
};
}  // namespace

TEST_CASE("through an ExpertComm the layer exchanges four times and matches one device", "[moe]") {
  const std::vector<int32_t> tokens = random_ids(18, 11, 7), targets = random_ids(18, 11, 8);
  GPTConfig cfg = moe_config(4, 2, 1.0);
  cfg.layers = 1;
  GPT alone(cfg), exchanged(cfg);
  CopyingExpertComm comm;
  exchanged.set_block_comm({.experts = &comm});
  CHECK(exchanged.forward_backward(tokens, targets, 3, 6) ==
        alone.forward_backward(tokens, targets, 3, 6));
  CHECK(comm.plans == 1);
  CHECK(comm.exchanges == 4);  // dispatch and combine, and their backwards
  const ParamList a = alone.params(), b = exchanged.params();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i]->name);
    CHECK(a[i]->grad.to_vector() == b[i]->grad.to_vector());
  }
  CHECK(exchanged.aux_loss() == alone.aux_loss());
  CHECK(exchanged.moe_stats().size() == 1);
  CHECK(exchanged.moe_stats()[0].tokens_per_expert == alone.moe_stats()[0].tokens_per_expert);
}

}  // namespace test_moe

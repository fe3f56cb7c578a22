// The Llama-style model (issue #48): every block style's backward against finite differences
// (a block, the whole model, an MoE block with SwiGLU experts), the published parameter counts
// of the Llama presets from the model itself and from the formula, the GPT-2 default untouched,
// RoPE's relative positions, and the model file's style fields and their refusals.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/llama_config.h"
#include "core/model/gpt.h"
#include "core/model/init.h"
#include "core/model/model_file.h"
#include "core/model/presets.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"
#include "core/theory/model_states.h"
#include "exercises/exercises.h"
#include "test_model_gradcheck.h"
#include "test_ops_gradcheck.h"

namespace test_llama_model {

using namespace mgpu;
using gradcheck::random_ids;
using model_gradcheck::check_block;
using model_gradcheck::check_model;
using model_gradcheck::perturb;

namespace {
// A Llama-shaped tiny model: 4 query heads sharing 2 kv heads, head size 4, F = 24.
GPTConfig llama_config() {
  return mgpu::testing::small_llama_config();
}

// Each style field alone on GPT-2's block, then all of them (Llama's), then MQA.
std::vector<std::pair<std::string, BlockStyle>> styles() {
  const BlockStyle llama = llama_config().style;
  BlockStyle rms, swiglu, rope, gqa, no_bias, mqa = llama;
  rms.norm = Norm::rmsnorm;
  swiglu.mlp = MlpKind::swiglu;
  swiglu.ffn_dim = 24;
  rope.positions = Positions::rope;
  rope.rope_theta = 100.0f;
  gqa.kv_heads = 2;
  no_bias.bias = false;
  mqa.kv_heads = 1;
  return {{"rmsnorm", rms},     {"swiglu", swiglu}, {"rope", rope}, {"gqa", gqa},
          {"no bias", no_bias}, {"llama", llama},   {"mqa", mqa}};
}

}  // namespace

TEST_CASE("every block style: the block's backward matches finite differences",
          "[llama][gradcheck]") {
  for (const auto& [name, style] : styles()) {
    INFO("style " << name);
    GPTConfig cfg = llama_config();
    cfg.style = style;
    cfg.recompute = GENERATE(Recompute::none, Recompute::selective, Recompute::full);
    INFO("recompute " << recompute_name(cfg.recompute));
    check_block(cfg, 0);
  }
}

TEST_CASE("the Llama-shaped model: every parameter's gradient matches finite differences",
          "[llama][gradcheck]") {
  GPTConfig cfg = llama_config();
  cfg.tie_embeddings = GENERATE(false, true);
  GPT model(cfg);
  for (const Param* p : model.params()) {  // no position table, no biases, RMSNorm's weight only
    CHECK(p->name != "embedding.wpe");
    CHECK(p->name.find(".bias") == std::string::npos);
  }
  check_model(model);
}

TEST_CASE("rotary positions: a shift of every position leaves the loss unchanged, learned do not",
          "[llama]") {
  // RoPE's scores depend only on position differences (Su et al. 2021): q_m . k_n sees m - n.
  // So a model told its tokens sit at 3..3+T-1 computes what it computes at 0..T-1 (to rounding)
  // and a wrong relative order changes it: what context parallelism's chunks must get right.
  GPTConfig cfg = llama_config();
  GPT model(cfg);
  ParamList params = model.params();
  for (size_t i = 0; i < params.size(); i++) perturb(*params[i], 500 + i);
  const int64_t b = 2, t = 5;
  auto tokens = random_ids(size_t(b * t), cfg.vocab, 6);
  auto targets = random_ids(size_t(b * t), cfg.vocab, 7);
  const float at_zero = model.loss(tokens, targets, b, t);
  model.set_positions({3, 4, 5, 6, 7});
  CHECK(model.loss(tokens, targets, b, t) == Approx(at_zero).epsilon(1e-5));
  model.set_positions({0, 2, 1, 3, 4});  // two tokens swapped: another model
  CHECK(std::abs(model.loss(tokens, targets, b, t) - at_zero) > 1e-4);
}

TEST_CASE("an MoE block of SwiGLU experts without biases: backward matches finite differences",
          "[llama][moe][gradcheck]") {
  GPTConfig cfg = llama_config();
  cfg.experts = 4;
  cfg.top_k = 2;
  cfg.expert_hidden = 12;
  cfg.route = &reference::route_tokens;
  MoeLayer layer(cfg, 0, BlockShard::whole(cfg));
  CHECK(layer.fc_weight.shape == Shape{4, 24, 16});  // gate | up: 2H rows per expert
  CHECK(layer.expert_params().size() == 2);          // fc and proj weights, no biases
  check_block(cfg, 0);
}

TEST_CASE("the Llama presets have their published parameter counts", "[llama][theory]") {
  // Llama 3 (Dubey et al. 2024, table 3) and Mixtral 8x7B (Jiang et al. 2024): the model's own
  // count (every declared parameter) and the formula's, both exact.
  const std::pair<const char*, int64_t> published[] = {{"llama3-8b", 8'030'261'248},
                                                       {"llama3-70b", 70'553'706'496},
                                                       {"llama3-405b", 405'853'388'800},
                                                       {"mixtral-8x7b", 46'702'792'704}};
  RankContext shapes(0, 1, Device::phantom(), HardwareProfile::ideal(0), ClockKind::modeled);
  shapes.tracer.enabled = false;
  ScopedRank guard(shapes);
  for (const auto& [name, count] : published) {
    INFO(name);
    const ModelPreset* p = find_model_preset(name);
    REQUIRE(p);
    GPTConfig cfg;
    cfg.layers = p->layers, cfg.dim = p->dim, cfg.heads = p->heads, cfg.seq_len = p->seq;
    cfg.vocab = p->vocab, cfg.tie_embeddings = p->tie_embeddings, cfg.style = p->style;
    cfg.experts = p->experts, cfg.top_k = p->top_k, cfg.expert_hidden = p->expert_hidden;
    CHECK(theory::gpt_parameters(cfg) == count);
    CHECK(GPT(cfg).num_params() == count);
  }
}

TEST_CASE("GPT-2's block is the default, unchanged", "[llama]") {
  GPTConfig cfg;
  CHECK(cfg.style.is_gpt2());
  CHECK(cfg.kv_head_count() == cfg.heads);
  CHECK(cfg.qkv_width() == 3 * cfg.dim);
  CHECK(cfg.ffn_hidden() == 4 * cfg.dim);
  CHECK(theory::gpt_parameters(cfg) == int64_t{cfg.vocab + cfg.seq_len} * cfg.dim +
                                           cfg.layers * theory::block_parameters(cfg.dim) +
                                           2 * cfg.dim + int64_t{cfg.vocab} * cfg.dim);
  const theory::BlockParameters block = theory::block_parameters(cfg);
  CHECK(block.sharded == 12 * cfg.dim * cfg.dim + 7 * cfg.dim);
  CHECK(block.replicated == 6 * cfg.dim);
}

TEST_CASE("a model file's block style: read, and each mistake refused in one line",
          "[llama][model_file]") {
  const ModelShape s = parse_model_json(
      R"({"layers": 2, "dim": 64, "heads": 4, "seq": 32, "norm": "rmsnorm", "mlp": "swiglu",
          "ffn_dim": 192, "positions": "rope", "rope_theta": 500000, "kv_heads": 2,
          "bias": false})",
      "m.json");
  CHECK(s.style == BlockStyle{.norm = Norm::rmsnorm,
                              .mlp = MlpKind::swiglu,
                              .ffn_dim = 192,
                              .positions = Positions::rope,
                              .rope_theta = 500000.0f,
                              .kv_heads = 2,
                              .bias = false});
  const std::string base = R"({"layers": 2, "dim": 64, "heads": 4, "seq": 32, )";
  auto refusal = [&](const std::string& field) {
    try {
      parse_model_json(base + field + "}", "m.json");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal(R"("norm": "batchnorm")") ==
        "m.json: 'norm' must be \"layernorm\" or \"rmsnorm\", got \"batchnorm\"");
  CHECK(refusal(R"("mlp": 2)") == "m.json: 'mlp' must be \"gelu\" or \"swiglu\", got 2");
  CHECK(refusal(R"("bias": "off")") == "m.json: 'bias' must be true or false, got \"off\"");
  CHECK(refusal(R"("rope_theta": 1)").find("'rope_theta' must be a number above 1") !=
        std::string::npos);
  CHECK(refusal(R"("kv_heads": -1)").find("'kv_heads' must be a whole number from 0") !=
        std::string::npos);
  GPTConfig cfg = llama_config();
  cfg.style.kv_heads = 3;
  CHECK_THROWS_WITH(cfg.validate(),
                    "GPT config: kv_heads (3) must divide the 4 query heads (each kv head serves "
                    "a group of them): use 1, 2, 4");
  cfg = llama_config();
  cfg.dim = 12, cfg.heads = 4;  // head size 3: no pairs to rotate
  CHECK_THROWS_WITH(cfg.validate(),
                    "GPT config: rope rotates pairs of a head's channels, so the head size dim / "
                    "heads (12 / 4 = 3) must be even: change dim or heads");
}

}  // namespace test_llama_model

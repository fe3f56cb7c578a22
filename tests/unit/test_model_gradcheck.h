// Gradient checks of the model's layers shared by test_model (GPT-2's block) and
// test_llama_model (Llama's): parameters nudged off their init so every path carries an O(0.1..1)
// gradient, and a block's input and parameter gradients against finite differences.
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "core/model/block.h"
#include "core/model/gpt.h"
#include "core/model/init.h"
#include "test_ops_gradcheck.h"

namespace model_gradcheck {

// GPT-2 init (std 0.02) makes gradients tiny, so float finite differences would be mostly
// noise; for the gradient checks we add N(0, 0.3) to every parameter (layernorm weights stay
// near 1) so every path carries an O(0.1..1) gradient.
inline void perturb(mgpu::Param& p, uint64_t seed) {
  auto noise = gradcheck::randn(size_t(p.data.numel()), seed, 0.3f);
  float* d = p.data.f32();
  for (size_t i = 0; i < noise.size(); i++) d[i] += noise[i];
}

using gradcheck::require_close;

// Block `index` of cfg (dense or MoE): dx and every parameter's gradient.
inline void check_block(const mgpu::GPTConfig& cfg, int index) {
  using namespace mgpu;
  Block block(cfg, index);
  ParamList params;
  block.collect(params);
  materialise(params, /*seed=*/1, cfg.dtype);
  for (size_t i = 0; i < params.size(); i++) perturb(*params[i], 100 + i);
  const int64_t b = 2, t = 5, c = cfg.dim;
  Tensor x = Tensor::zeros({b, t, c}, MemCategory::activations);
  gradcheck::fill_randn(x, 7);
  BlockActivations acts = BlockActivations::allocate(cfg, b, t);
  auto r = gradcheck::randn(size_t(b * t * c), 8);
  auto loss = [&] {
    block.forward(x, acts);
    return gradcheck::project(acts.out, r);
  };
  loss();
  Tensor dx = Tensor::zeros({b, t, c}, MemCategory::workspace);
  block.backward(dx, Tensor::from({b, t, c}, r), acts);
  require_close(gradcheck::check(x, dx.to_vector(), loss), "block dx");
  for (Param* p : params)
    require_close(gradcheck::check(p->data, p->grad.to_vector(), loss), p->name);
}

// The whole model: every parameter's gradient of the mean loss over a random batch.
inline void check_model(mgpu::GPT& model) {
  using namespace mgpu;
  ParamList params = model.params();
  for (size_t i = 0; i < params.size(); i++) perturb(*params[i], 300 + i);
  const int64_t b = 2, t = 5, vocab = model.config().vocab;
  auto tokens = gradcheck::random_ids(size_t(b * t), vocab, 4);
  auto targets = gradcheck::random_ids(size_t(b * t), vocab, 5);
  model.zero_grad();
  model.forward_backward(tokens, targets, b, t);
  auto loss = [&] { return double(model.loss(tokens, targets, b, t)); };
  for (Param* p : params)
    require_close(gradcheck::check(p->data, p->grad.to_vector(), loss), p->name);
}

}  // namespace model_gradcheck

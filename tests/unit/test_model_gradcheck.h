// Gradient checks of the model's layers shared by test_model (GPT-2's block) and
// test_llama_model (Llama's): parameters nudged off their init so every path carries an O(0.1..1)
// gradient, and a block's input and parameter gradients against finite differences.
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "core/model/block.h"
#include "core/model/init.h"
#include "test_ops_gradcheck.h"

namespace model_gradcheck {

inline constexpr double kTol = 1e-2;

// GPT-2 init (std 0.02) makes gradients tiny, so float finite differences would be mostly
// noise; for the gradient checks we add N(0, 0.3) to every parameter (layernorm weights stay
// near 1) so every path carries an O(0.1..1) gradient.
inline void perturb(mgpu::Param& p, uint64_t seed) {
  auto noise = gradcheck::randn(size_t(p.data.numel()), seed, 0.3f);
  float* d = p.data.f32();
  for (size_t i = 0; i < noise.size(); i++) d[i] += noise[i];
}

inline void require_close(const gradcheck::Result& r, const std::string& what) {
  INFO(what << ": rel error " << r.rel_error << ", |numeric| " << r.numeric_norm);
  CHECK(r.numeric_norm > 0);
  CHECK(r.rel_error < kTol);
}

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

}  // namespace model_gradcheck

#include "core/parallel/layerwise.h"

#include "core/runtime/context.h"

namespace mgpu::parallel {

namespace {
void call(const std::function<void(int)>& hook, int layer) {
  if (hook) hook(layer);
}
}  // namespace

int layer_count(const GPT& model) {
  return static_cast<int>(model.blocks.size()) + 2;
}

ParamList layer_params(GPT& model, int layer) {
  ParamList list;
  const int blocks = static_cast<int>(model.blocks.size());
  if (layer == 0)
    model.embedding.collect(list);
  else if (layer <= blocks)
    model.blocks[layer - 1].collect(list);
  else
    model.head.collect(list);
  return list;
}

float forward_by_layer(GPT& model, const data::Batch& batch, GPTActivations& acts, float grad_scale,
                       const LayerHooks& hooks) {
  const int blocks = static_cast<int>(model.blocks.size());
  call(hooks.before_forward, 0);
  {
    ComputeScope s({.name = "forward embedding", .cat = trace::cat::forward, .layer = -1});
    model.embedding.forward(acts.embedded, batch.tokens);
  }
  call(hooks.after_forward, 0);
  const Tensor* x = &acts.embedded;
  for (int i = 0; i < blocks; ++i) {
    call(hooks.before_forward, i + 1);
    {
      ComputeScope s({.name = "forward", .cat = trace::cat::forward, .layer = i});
      model.blocks[i].forward(*x, acts.blocks[i]);
    }
    call(hooks.after_forward, i + 1);
    x = &acts.blocks[i].out;
  }
  call(hooks.before_forward, blocks + 1);
  float loss;
  {
    ComputeScope s({.name = "forward head", .cat = trace::cat::forward, .layer = blocks});
    model.set_loss_grad_scale(grad_scale);
    loss = model.head.forward_loss(*x, batch.targets, acts.head, grad_scale);
  }
  call(hooks.after_forward, blocks + 1);
  return loss;
}

void backward_by_layer(GPT& model, const data::Batch& batch, GPTActivations& acts,
                       const LayerHooks& hooks) {
  const int blocks = static_cast<int>(model.blocks.size());
  // One gradient buffer for the residual stream, in the activations' dtype as GPT::backward.
  Tensor dx = Tensor::empty(acts.embedded.shape(), MemCategory::workspace, acts.embedded.dtype());
  call(hooks.before_backward, blocks + 1);
  {
    ComputeScope s({.name = "backward head", .cat = trace::cat::backward, .layer = blocks});
    model.head.backward(dx, acts.head);
  }
  call(hooks.after_backward, blocks + 1);
  for (int i = blocks - 1; i >= 0; --i) {
    call(hooks.before_backward, i + 1);
    {
      ComputeScope s({.name = "backward", .cat = trace::cat::backward, .layer = i});
      model.blocks[i].backward(dx, dx, acts.blocks[i]);
    }
    call(hooks.after_backward, i + 1);
  }
  call(hooks.before_backward, 0);
  {
    ComputeScope s({.name = "backward embedding", .cat = trace::cat::backward, .layer = -1});
    model.embedding.backward(dx, batch.tokens);
  }
  call(hooks.after_backward, 0);
}

}  // namespace mgpu::parallel

// The model's forward and backward one layer at a time, with a hook before and after each layer:
// the places where a data-parallel layout communicates (DDP launches a bucket's all-reduce after
// a layer's backward; ZeRO-3 gathers a layer's parameters before it runs and reduce-scatters its
// gradients after). The math is GPT's own layers; this file only orders them and opens one trace
// scope per layer.
//
// Layers are numbered in forward order: 0 = embedding, 1..L = blocks[0..L), L+1 = head.
#pragma once
#include <functional>

#include "core/data/task.h"
#include "core/model/gpt.h"

namespace mgpu::parallel {

struct LayerHooks {
  std::function<void(int layer)> before_forward, after_forward;
  std::function<void(int layer)> before_backward, after_backward;
};

int layer_count(const GPT& model);  // blocks + 2
// The parameters of one layer, in forward order (the order GPT::params lists them).
ParamList layer_params(GPT& model, int layer);

// GPT::forward, layer by layer; returns the mean loss and leaves grad_scale * dloss/dlogits.
float forward_by_layer(GPT& model, const data::Batch& batch, GPTActivations& acts, float grad_scale,
                       const LayerHooks& hooks);
// GPT::backward, layer by layer (head first, embedding last); gradients accumulate.
void backward_by_layer(GPT& model, const data::Batch& batch, GPTActivations& acts,
                       const LayerHooks& hooks);

}  // namespace mgpu::parallel

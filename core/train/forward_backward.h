// The compute of one step on a whole model, shared by the layouts that hold one (the single
// device, naive data parallelism's driver): zero the gradients, allocate the activations, forward
// and backward, each a scope on the timeline.
#pragma once
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/tensor/tensor.h"

namespace mgpu::train {

// Returns the mean loss over the batch; loss * grad_scale seeds the backward. With
// `backward_stores`, what the backward's 2-byte stores rounded (flushed to zero, overflowed to
// inf) is added to it: fp16's lost gradients, counted.
float forward_backward_traced(GPT& model, const data::Batch& batch, float grad_scale = 1.0f,
                              StoreCounters* backward_stores = nullptr);

}  // namespace mgpu::train

// A stage's messages during one step (see p2p.h). Every message carries its own tag, so a pair of
// stages exchanging activations and gradients of several micro-batches and chunks can never
// confuse two of them.
#include "core/parallel/pipeline/p2p.h"

namespace mgpu::pipeline {

Shape activation_shape(const data::Batch& microbatch, const GPTConfig& config, int seq_parts) {
  return {microbatch.B, microbatch.T / seq_parts, config.dim};
}

int StageP2P::tag(const Action& a) const {
  const MessageKey key = *message_key(schedule_, stage_, a);
  return (key.microbatch * schedule_.num_virtual_stages() + key.to_virtual_stage) * 2 +
         (key.is_grad ? 1 : 0);
}

void StageP2P::recv_activation(const Action& a) {
  if (a.peer == stage_) return;  // the V's turn: handed over locally at the send
  Tensor t = Tensor::empty(activation_shape(microbatches_.at(a.microbatch), config_, seq_parts_),
                           MemCategory::activations, config_.dtype);
  comm_.recv(t, a.peer, tag(a));
  received_activations_[{a.microbatch, a.chunk}] = std::move(t);
}

void StageP2P::send_activation(const Action& a, const Tensor& out) {
  if (a.peer == stage_) {  // the next chunk is on this stage: no message, no copy
    received_activations_[{a.microbatch, schedule_.neighbour(stage_, a.chunk, +1).second}] = out;
    return;
  }
  activation_sends_[{a.microbatch, a.chunk}] = comm_.isend(out, a.peer, tag(a));
}

void StageP2P::recv_grad(const Action& a) {
  if (a.peer == stage_) return;  // handed over locally at the send
  Tensor t = Tensor::empty(activation_shape(microbatches_.at(a.microbatch), config_, seq_parts_),
                           MemCategory::comm_buffers, config_.dtype);
  comm_.recv(t, a.peer, tag(a));
  received_grads_[{a.microbatch, a.chunk}] = std::move(t);
}

void StageP2P::send_grad(const Action& a) {
  if (a.peer == stage_) {
    received_grads_[{a.microbatch, schedule_.neighbour(stage_, a.chunk, -1).second}] =
        std::move(input_grads_.at({a.microbatch, a.chunk}));
    input_grads_.erase({a.microbatch, a.chunk});
    return;
  }
  // Keep the buffer until the send completes: waited before the next backward needs memory.
  grad_send_buffer_ = std::move(input_grads_.at({a.microbatch, a.chunk}));
  input_grads_.erase({a.microbatch, a.chunk});
  grad_send_ = comm_.isend(grad_send_buffer_, a.peer, tag(a));
}

Tensor StageP2P::take_activation(int microbatch, int chunk) {
  Tensor t = std::move(received_activations_.at({microbatch, chunk}));
  received_activations_.erase({microbatch, chunk});
  return t;
}

Tensor StageP2P::take_grad(int microbatch, int chunk) {
  Tensor t = std::move(received_grads_.at({microbatch, chunk}));
  received_grads_.erase({microbatch, chunk});
  return t;
}

void StageP2P::keep_input_grad(int microbatch, int chunk, Tensor grad) {
  input_grads_[{microbatch, chunk}] = std::move(grad);
}

void StageP2P::wait_grad_send() {
  grad_send_.wait();
  grad_send_buffer_ = Tensor();
}

void StageP2P::wait_activation_send(int microbatch, int chunk) {
  if (auto it = activation_sends_.find({microbatch, chunk}); it != activation_sends_.end()) {
    it->second.wait();
    activation_sends_.erase(it);
  }
}

void StageP2P::wait_all() {
  for (auto& [key, send] : activation_sends_) send.wait();
  activation_sends_.clear();
  grad_send_.wait();
}

}  // namespace mgpu::pipeline

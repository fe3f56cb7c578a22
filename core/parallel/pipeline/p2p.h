// The point-to-point communication of one pipeline stage during one step. Activations flow to the
// next virtual stage, gradients flow back to the previous one; sends are async (isend, waited when
// the buffer is about to go, or at the end of the step), receives block, which is exactly what
// makes bubbles. When the neighbouring virtual stage is on this very stage (the turn of a V), the
// tensor is handed over locally: no message, no copy.
#pragma once
#include <map>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/parallel/pipeline/schedule.h"

namespace mgpu::pipeline {

// [b, T, C]: what flows between stages for one micro-batch, both ways ([b, T/seq_parts, C] when
// the blocks are sequence-parallel).
Shape activation_shape(const data::Batch& microbatch, const GPTConfig& config, int seq_parts = 1);

class StageP2P {
 public:
  StageP2P(const Schedule& schedule, int stage, const GPTConfig& config,
           const std::vector<data::Batch>& microbatches, comm::Comm& comm, int seq_parts = 1)
      : seq_parts_(seq_parts),
        schedule_(schedule),
        stage_(stage),
        config_(config),
        microbatches_(microbatches),
        comm_(comm) {}

  // The four communication actions of a schedule.
  void recv_activation(const Action& a);
  // `out` is the chunk's output in the forward's stash: it must stay alive until the send has
  // left, which release() waits for before the stash goes.
  void send_activation(const Action& a, const Tensor& out);
  void recv_grad(const Action& a);
  void send_grad(const Action& a);

  // What a compute action consumes and produces, keyed by (micro-batch, chunk).
  Tensor take_activation(int microbatch, int chunk);             // a forward's input
  Tensor take_grad(int microbatch, int chunk);                   // a backward's d loss / d output
  void keep_input_grad(int microbatch, int chunk, Tensor grad);  // for the next send_grad

  // The last gradient send has left: its buffer can go (before a backward allocates).
  void wait_grad_send();
  // The activation send of (micro-batch, chunk), if any, has left: its stash can go.
  void wait_activation_send(int microbatch, int chunk);
  // End of step: every send has left.
  void wait_all();

 private:
  int seq_parts_;                   // sequence parallelism: the messages carry T / seq_parts tokens
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  int tag(const Action& a) const;
  int virtual_stage(int chunk) const { return schedule_.virtual_stage(stage_, chunk); }

  const Schedule& schedule_;
  int stage_;
  const GPTConfig& config_;
  const std::vector<data::Batch>& microbatches_;
  comm::Comm& comm_;
  std::map<Key, Tensor> received_activations_, received_grads_, input_grads_;
  std::map<Key, comm::Work> activation_sends_;  // in flight; their buffers live in the stashes
  comm::Work grad_send_;                        // the last gradient isend, and its buffer
  Tensor grad_send_buffer_;
};

}  // namespace mgpu::pipeline

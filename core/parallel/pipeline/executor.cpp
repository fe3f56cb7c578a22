// The pipeline executor: one stage runs its list of the schedule's actions, in order. A forward
// STASHES its activations under (micro-batch, chunk); the matching backward (or zero-bubble's W)
// frees them: that stash is the memory story (GPipe holds all M at the turn, 1F1B at most P-s).
// Communication (p2p.h): activations go to the next virtual stage, gradients back to the
// previous one; sends are async and receives block, which is what makes the bubbles.
#include "core/parallel/pipeline/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/data/sampler.h"
#include "core/parallel/pipeline/executor_internal.h"
#include "core/parallel/pipeline/mirror_gradients.h"
#include "core/parallel/pipeline/p2p.h"
#include "core/parallel/pipeline/zero_bubble.h"
#include "core/runtime/context.h"

namespace mgpu::pipeline {

namespace detail {

StageRunner::StageRunner(StageModel& model, const Schedule& schedule,
                         const std::vector<data::Batch>& microbatches, comm::Comm& comm,
                         const ExecutorOptions& options)
    : model_(model),
      schedule_(schedule),
      microbatches_(microbatches),
      options_(options),
      ctx_(current_rank()),
      p2p_(schedule, model.stage, model.config, microbatches, comm, model.shard.seq_parts) {}

StageStepStats StageRunner::run() {
  ctx_.allocator.start_window();  // this step's peak; the run's stays in stats().peak
  for (const Action& action : schedule_.actions.at(model_.stage)) execute(action);
  p2p_.wait_all();
  stats_.peak_activation_bytes =
      ctx_.allocator.stats().window_peak[static_cast<int>(MemCategory::activations)];
  return stats_;
}

// One action:
//   recv_activation  blocking recv of a [b,T,C] activation from the previous virtual stage
//   forward          (embed if first virtual stage) -> this chunk's blocks -> (loss if last)
//   send_activation  isend of the chunk's output to the next virtual stage
//   recv_grad        blocking recv of d loss / d output from the next virtual stage
//   backward         (head backward if last) -> blocks backward -> (embedding backward if first)
//   send_grad        isend of d loss / d input to the previous virtual stage
//   backward_input / backward_weight  zero-bubble's split backward (zero_bubble.h): B sends the
//                    input gradient at once, W computes the weight gradients later
void StageRunner::execute(const Action& a) {
  switch (a.kind) {
    case ActionKind::recv_activation:
      p2p_.recv_activation(a);
      break;
    case ActionKind::send_activation:
      p2p_.send_activation(a, stashes_.at({a.microbatch, a.chunk}).blocks.back().out);
      break;
    case ActionKind::recv_grad:
      p2p_.recv_grad(a);
      break;
    case ActionKind::send_grad:
      p2p_.send_grad(a);
      break;
    case ActionKind::forward:
      forward(a.microbatch, a.chunk);
      break;
    case ActionKind::backward:
      backward(a.microbatch, a.chunk, /*input_only=*/false);
      break;
    case ActionKind::backward_input:
      backward(a.microbatch, a.chunk, /*input_only=*/true);
      break;
    case ActionKind::backward_weight:
      backward_weight(a.microbatch, a.chunk);
      break;
  }
}

// In theory mode a compute action costs a fixed share of the stage's time (see executor.h).
// A chunk holds stages / parts of a stage's share: 1/V, but a whole one in DualPipe (one part
// of one of its two copies).
void StageRunner::charge_theory_time(double whole_stage_cost) {
  const int chunks_per_share = schedule_.num_virtual_stages() / schedule_.stages;
  if (!options_.theory) return;
  double cost = whole_stage_cost / chunks_per_share;
  if (const FaultPlan& faults = ctx_.profile.faults; !faults.empty())  // a slow rank, jitter
    cost *= faults.compute_factor(ctx_.rank, ctx_.step, ctx_.kernels++);
  ctx_.clock.advance_compute(cost);
}

void StageRunner::forward(int mb, int chunk) {
  ComputeScope scope({.name = fmt::format("F{}", mb),
                      .cat = trace::cat::forward,
                      .microbatch = mb,
                      .chunk = chunk});
  const data::Batch& batch = microbatches_.at(mb);
  const int64_t before = activation_bytes();
  Stash stash;
  if (is_first(chunk)) {
    stash.input =
        Tensor::empty(activation_shape(mb), MemCategory::activations, model_.config.dtype);
    embed(mb, stash.input);
  } else {
    stash.input = p2p_.take_activation(mb, chunk);
  }
  const Tensor* x = &stash.input;
  // The head's loss gradient carries 1/micro-batches x the loss scale; so does the aux loss's.
  const float scale = 1.0f / static_cast<float>(microbatches_.size());
  for (Block& block : model_.chunks[chunk]) block.moe.loss_grad_scale = scale * options_.loss_scale;
  stash.blocks.reserve(model_.chunks[chunk].size());  // acts[i].input views the previous out
  for (const Block& block : model_.chunks[chunk]) {
    stash.blocks.push_back(
        BlockActivations::allocate(model_.config, model_.shard, batch.B, batch.T));
    block.forward(*x, stash.blocks.back());
    x = &stash.blocks.back().out;
  }
  if (is_last(chunk)) {
    stash.head =
        HeadActivations::allocate(model_.config, batch.B, batch.T, model_.head->vocab_parts());
    const Tensor head_input = gather_sequence(*x, mb, MemCategory::activations);
    stats_.loss += scale * model_.head->forward_loss(head_input, batch.targets, *stash.head,
                                                     scale * options_.loss_scale);
  }
  if (options_.theory) charge_theory_time(options_.theory->forward);
  // The input is part of the stash (counted even when it arrived before this scope opened).
  stash.bytes = activation_bytes() - before + (is_first(chunk) ? 0 : stash.input.bytes());
  stats_.stash_bytes = std::max(stats_.stash_bytes, stash.bytes);
  stashes_.emplace(Key{mb, chunk}, std::move(stash));
  stats_.peak_stashed = std::max(stats_.peak_stashed, ++awaiting_backward_);
}

// The full backward (input_only = false), or zero-bubble's B: only the input gradient, keeping
// what W will need (the stash then lives until W).
void StageRunner::backward(int mb, int chunk, bool input_only) {
  ComputeScope scope({.name = fmt::format("B{}", mb),
                      .cat = trace::cat::backward,
                      .microbatch = mb,
                      .chunk = chunk});
  Stash& stash = stashes_.at({mb, chunk});
  p2p_.wait_grad_send();  // the previous gradient is on its way: its buffer can go
  Tensor grad;            // d loss / d (current activation), updated in place block by block
  if (is_last(chunk)) {
    grad = Tensor::empty(whole_sequence_shape(mb), MemCategory::comm_buffers, model_.config.dtype);
    if (input_only)
      head_backward_input(*model_.head, grad, *stash.head, stash.head_keep.emplace());
    else
      model_.head->backward(grad, *stash.head);
    grad = keep_my_tokens_of(grad, mb);
  } else {
    grad = p2p_.take_grad(mb, chunk);
  }
  auto& blocks = model_.chunks[chunk];
  if (input_only) stash.blocks_keep.resize(blocks.size());
  for (int i = static_cast<int>(blocks.size()) - 1; i >= 0; --i) {
    if (input_only)
      backward_input_recomputed(blocks[i], grad, stash.blocks[i], stash.blocks_keep[i]);
    else
      blocks[i].backward(grad, grad, stash.blocks[i]);
  }
  if (is_first(chunk) && input_only)
    stash.embedding_grad = std::move(grad);  // the embedding has only weights: W's job
  else if (is_first(chunk))
    model_.embedding->backward(gather_sequence(grad, mb, MemCategory::workspace),
                               microbatches_.at(mb).tokens);
  else
    p2p_.keep_input_grad(mb, chunk, std::move(grad));  // sent by the following send_grad
  if (options_.theory) charge_theory_time(options_.theory->backward * (input_only ? 0.5 : 1.0));
  --awaiting_backward_;
  if (!input_only) release(mb, chunk);
}

// This micro-batch's activations are no longer needed (once their send has left).
void StageRunner::release(int mb, int chunk) {
  p2p_.wait_activation_send(mb, chunk);
  stashes_.erase({mb, chunk});
}

}  // namespace detail

using detail::StageRunner;

namespace {

void check_theory_mode(const ExecutorOptions& options) {
  if (!options.theory) return;
  const HardwareProfile& profile = current_rank().profile;
  if (profile.kernel_time(1e9, 1e9) != 0.0 || profile.transfer_time(0, 1, 1e9) != 0.0)
    throw std::invalid_argument(
        "pipeline theory mode charges fixed times per action: it needs free kernels and links "
        "(HardwareProfile::ideal(0)), not profile '" +
        profile.name + "'");
}

}  // namespace

StageStepStats run_schedule(StageModel& model, const Schedule& schedule,
                            const std::vector<data::Batch>& microbatches, comm::Comm& comm,
                            const ExecutorOptions& options) {
  if (comm.size() != schedule.stages || model.stages != schedule.stages ||
      model.virtual_stages != schedule.virtual_stages || model.placement != schedule.placement ||
      static_cast<int>(microbatches.size()) != schedule.microbatches)
    throw std::invalid_argument(fmt::format(
        "pipeline executor: schedule '{}' is for {} stages x {} chunks and {} micro-batches, but "
        "the world has {} ranks, the model {} stages x {} chunks, the batch {} micro-batches",
        schedule.name, schedule.stages, schedule.virtual_stages, schedule.microbatches, comm.size(),
        model.stages, model.virtual_stages, microbatches.size()));
  check_theory_mode(options);
  return StageRunner(model, schedule, microbatches, comm, options).run();
}

// ---------------------------------------------------------------------------------- one step
// The step around the executor, for the tests that drive a stage without the trainer: a barrier
// (stages finish a step at different times; lining them up makes each step's window, and its
// bubble, start together on the timeline), the window, zero_grad, the schedule, the optimizer.

namespace {

// DualPipe's pair of copies, or none for a pipeline holding one copy.
std::unique_ptr<MirrorGradients> mirror_of(const Schedule& schedule, comm::Comm& comm) {
  if (schedule.placement != Placement::bidirectional) return nullptr;
  return std::make_unique<MirrorGradients>(comm);
}

// The schedule, then (DualPipe) the two copies' gradients and loss halves summed.
StageStepStats run_and_mirror(StageModel& model, const Schedule& schedule, const data::Batch& batch,
                              comm::Comm& comm, const ExecutorOptions& options,
                              MirrorGradients* mirror) {
  StageStepStats stats = run_schedule(
      model, schedule, data::split_micro_batches(batch, schedule.microbatches), comm, options);
  if (mirror) {
    mirror->all_reduce(model);
    if (model.head) stats.loss = mirror->loss(stats.loss);
  }
  return stats;
}

// The body of a step, inside its window: zero_grad, the schedule, the optimizer.
StageStepStats step_body(StageModel& model, optim::Optimizer& optimizer, const Schedule& schedule,
                         const data::Batch& batch, comm::Comm& comm,
                         const ExecutorOptions& options) {
  model.zero_grad();
  const auto mirror = mirror_of(schedule, comm);
  StageStepStats stats = run_and_mirror(model, schedule, batch, comm, options, mirror.get());
  {
    ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
    optimizer.step();  // each stage updates only its own parameters: no communication needed
  }
  return stats;
}

}  // namespace

StageStepStats train_step(StageModel& model, optim::Optimizer& optimizer, const Schedule& schedule,
                          const data::Batch& batch, comm::Comm& comm, int step,
                          const ExecutorOptions& options) {
  // Stages finish a step at different times (stage 0 runs the last backward); the barrier lines
  // them up so each step's window, and its bubble, is measured from a common start.
  comm.barrier();
  StepScope scope(step);
  return step_body(model, optimizer, schedule, batch, comm, options);
}

}  // namespace mgpu::pipeline

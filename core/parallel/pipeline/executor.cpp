// The pipeline executor. Per stage, per step: walk the schedule's actions in order.
//   recv_activation  blocking recv of a [b,T,C] activation from the previous virtual stage
//   forward          (embed if first virtual stage) -> this chunk's blocks -> (loss if last)
//   send_activation  isend of the chunk's output to the next virtual stage
//   recv_grad        blocking recv of d loss / d output from the next virtual stage
//   backward         (head backward if last) -> blocks backward -> (embedding backward if first)
//   send_grad        isend of d loss / d input to the previous virtual stage
//   backward_input / backward_weight  zero-bubble's split backward (stage.h): B sends the input
//                    gradient at once, W computes the weight gradients later to fill a bubble
// A forward STASHES its activations under (micro-batch, chunk); the matching backward (or W)
// frees them. That stash is the memory story: GPipe holds all M at the turn, 1F1B at most P-s.
#include "core/parallel/pipeline/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/data/sampler.h"
#include "core/model/init.h"
#include "core/parallel/pipeline/stage.h"
#include "core/runtime/context.h"

namespace mgpu::pipeline {

// ---------------------------------------------------------------------------------- StageModel

StageModel StageModel::build(const GPTConfig& config, int stage, int stages, int virtual_stages,
                             Placement placement) {
  StageModel m =
      declare(config, stage, stages, virtual_stages, BlockShard::whole(config), nullptr, placement);
  materialise(m.params(), config.seed, config.dtype);
  return m;
}

StageModel StageModel::declare(const GPTConfig& config, int stage, int stages, int virtual_stages,
                               const BlockShard& shard, const BlockSplit& split,
                               Placement placement) {
  StageModel m;
  m.placement = placement;
  m.config = config;
  m.shard = shard;
  m.stage = stage;
  m.stages = stages;
  m.virtual_stages = virtual_stages;
  // Only this stage's layers are declared; each is materialised (by the caller) at its place in
  // the seeded single-device model, so a stage holds exactly the single-device weights of its
  // layers and never the rest of the model.
  const LayerPartition partition = partition_layers(config.layers, stages * virtual_stages);
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    const auto [begin, end] = partition.ranges[virtual_stage(placement, stages, stage, chunk)];
    m.chunk_layers.emplace_back(begin, end);
    std::vector<Block> blocks;
    for (int layer = begin; layer < end; ++layer) {
      blocks.emplace_back(config, layer, shard);
      if (split) split(blocks.back());
    }
    m.chunks.push_back(std::move(blocks));
  }
  if (stage == 0) m.embedding.emplace(config);
  const int last = stages * virtual_stages - 1;  // the head's virtual stage
  if (virtual_stage(placement, stages, stage, virtual_stages - 1) == last) m.head.emplace(config);
  for (Param* p : m.params()) p->spec.stage = stage;
  return m;
}

ParamList StageModel::params() {
  ParamList list;
  if (embedding) embedding->collect(list);
  for (auto& blocks : chunks)
    for (Block& block : blocks) block.collect(list);
  if (head) head->collect(list);
  return list;
}

void StageModel::zero_grad() {
  for (Param* p : params()) p->grad.fill(0.0f);
}

int StageModel::num_layers() const {
  int n = 0;
  for (const auto& blocks : chunks) n += static_cast<int>(blocks.size());
  return n;
}

// ---------------------------------------------------------------------------------- executor

namespace {

// Everything a forward of (micro-batch, chunk) keeps for its backward.
struct Stash {
  Tensor input;  // the chunk's input: the embedding output or the received activation
  std::vector<BlockActivations> blocks;
  std::optional<HeadActivations> head;
  int64_t bytes = 0;
  // Zero-bubble only: what B keeps for W (and the embedding's gradient, applied in W).
  std::vector<BlockWeightGradInputs> blocks_keep;
  std::optional<HeadWeightGradInputs> head_keep;
  Tensor embedding_grad;
};

// One stage's state during one step.
class StageRunner {
 public:
  StageRunner(StageModel& model, const Schedule& schedule,
              const std::vector<data::Batch>& microbatches, comm::Comm& comm,
              const ExecutorOptions& options)
      : model_(model),
        schedule_(schedule),
        microbatches_(microbatches),
        comm_(comm),
        options_(options),
        ctx_(current_rank()) {}

  StageStepStats run() {
    ctx_.allocator.start_window();  // this step's peak; the run's stays in stats().peak
    for (const Action& action : schedule_.actions.at(model_.stage)) execute(action);
    for (auto& [key, send] : activation_sends_) send.wait();
    activation_sends_.clear();
    grad_send_.wait();
    stats_.peak_activation_bytes =
        ctx_.allocator.stats().window_peak[static_cast<int>(MemCategory::activations)];
    return stats_;
  }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  int virtual_stage(int chunk) const { return schedule_.virtual_stage(model_.stage, chunk); }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const {
    return virtual_stage(chunk) == schedule_.num_virtual_stages() - 1;
  }
  int next_chunk(int chunk) const { return schedule_.chunk_of(virtual_stage(chunk) + 1); }
  int previous_chunk(int chunk) const { return schedule_.chunk_of(virtual_stage(chunk) - 1); }
  Shape activation_shape(int microbatch) const {
    const data::Batch& b = microbatches_.at(microbatch);
    return {b.B, b.T, model_.config.dim};
  }
  // Every message has its own tag, so a pair of stages exchanging activations and gradients of
  // several micro-batches and chunks can never confuse two of them.
  int tag(const Action& a) const {
    const MessageKey key = *message_key(schedule_, model_.stage, a);
    return (key.microbatch * schedule_.num_virtual_stages() + key.to_virtual_stage) * 2 +
           (key.is_grad ? 1 : 0);
  }

  void execute(const Action& a) {
    switch (a.kind) {
      case ActionKind::recv_activation: {
        if (a.peer == model_.stage) break;  // the V's turn: handed over locally at the send
        Tensor t = Tensor::empty(activation_shape(a.microbatch), MemCategory::activations,
                                 model_.config.dtype);
        comm_.recv(t, a.peer, tag(a));
        received_activations_[{a.microbatch, a.chunk}] = std::move(t);
        break;
      }
      case ActionKind::send_activation: {
        // The buffer is the stash's last output: it stays alive until the backward frees the
        // stash, which waits for this send first.
        const Tensor& out = stashes_.at({a.microbatch, a.chunk}).blocks.back().out;
        if (a.peer == model_.stage) {  // the next chunk is on this stage: no message, no copy
          received_activations_[{a.microbatch, next_chunk(a.chunk)}] = out;
          break;
        }
        activation_sends_[{a.microbatch, a.chunk}] = comm_.isend(out, a.peer, tag(a));
        break;
      }
      case ActionKind::recv_grad: {
        if (a.peer == model_.stage) break;  // handed over locally at the send
        Tensor t = Tensor::empty(activation_shape(a.microbatch), MemCategory::comm_buffers,
                                 model_.config.dtype);
        comm_.recv(t, a.peer, tag(a));
        received_grads_[{a.microbatch, a.chunk}] = std::move(t);
        break;
      }
      case ActionKind::send_grad: {
        if (a.peer == model_.stage) {
          received_grads_[{a.microbatch, previous_chunk(a.chunk)}] =
              std::move(input_grads_.at({a.microbatch, a.chunk}));
          input_grads_.erase({a.microbatch, a.chunk});
          break;
        }
        // Keep the buffer until the send completes: waited before the next backward needs memory.
        grad_send_buffer_ = std::move(input_grads_.at({a.microbatch, a.chunk}));
        input_grads_.erase({a.microbatch, a.chunk});
        grad_send_ = comm_.isend(grad_send_buffer_, a.peer, tag(a));
        break;
      }
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
  void charge_theory_time(double whole_stage_cost) {
    if (options_.theory) ctx_.clock.advance_compute(whole_stage_cost / model_.virtual_stages);
  }

  void forward(int mb, int chunk) {
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
      model_.embedding->forward(stash.input, batch.tokens);
    } else {
      stash.input = std::move(received_activations_.at({mb, chunk}));
      received_activations_.erase({mb, chunk});
    }
    const Tensor* x = &stash.input;
    stash.blocks.reserve(model_.chunks[chunk].size());  // acts[i].input views the previous out
    for (const Block& block : model_.chunks[chunk]) {
      stash.blocks.push_back(
          BlockActivations::allocate(model_.config, model_.shard, batch.B, batch.T));
      block.forward(*x, stash.blocks.back());
      x = &stash.blocks.back().out;
    }
    if (is_last(chunk)) {
      stash.head = HeadActivations::allocate(model_.config, batch.B, batch.T);
      const float scale = 1.0f / static_cast<float>(microbatches_.size());
      stats_.loss += scale * model_.head->forward_loss(*x, batch.targets, *stash.head,
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
  void backward(int mb, int chunk, bool input_only) {
    ComputeScope scope({.name = fmt::format("B{}", mb),
                        .cat = trace::cat::backward,
                        .microbatch = mb,
                        .chunk = chunk});
    Stash& stash = stashes_.at({mb, chunk});
    grad_send_.wait();  // the previous gradient is on its way: its buffer can go
    grad_send_buffer_ = Tensor();
    Tensor grad;  // d loss / d (current activation), updated in place block by block
    if (is_last(chunk)) {
      grad = Tensor::empty(activation_shape(mb), MemCategory::comm_buffers, model_.config.dtype);
      if (input_only)
        head_backward_input(*model_.head, grad, *stash.head, stash.head_keep.emplace());
      else
        model_.head->backward(grad, *stash.head);
    } else {
      grad = std::move(received_grads_.at({mb, chunk}));
      received_grads_.erase({mb, chunk});
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
      model_.embedding->backward(grad, microbatches_.at(mb).tokens);
    else
      input_grads_[{mb, chunk}] = std::move(grad);  // sent by the following send_grad
    if (options_.theory) charge_theory_time(options_.theory->backward * (input_only ? 0.5 : 1.0));
    --awaiting_backward_;
    if (!input_only) release(mb, chunk);
  }

  // Zero-bubble's B of one block under --recompute: the dropped activations are recomputed once,
  // here, and what W reads of them stays in the stash until W runs (the attention probabilities,
  // qkv and the MLP pre-activation do not: only B reads them).
  void backward_input_recomputed(const Block& block, Tensor& grad, BlockActivations& kept,
                                 BlockWeightGradInputs& keep) {
    if (block.config.recompute == Recompute::none) {
      block_backward_input(block, grad, grad, kept, keep);
      return;
    }
    BlockActivations a = block.recomputed(kept);
    block_backward_input(block, grad, grad, a, keep);
    a.qkv = a.att = a.fc = Tensor();
    a.out = kept.out;  // the forward's output: a send may still be reading it
    kept = std::move(a);
  }

  // Zero-bubble's W: the weight gradients of a micro-batch whose B already ran.
  void backward_weight(int mb, int chunk) {
    ComputeScope scope({.name = fmt::format("W{}", mb),
                        .cat = trace::cat::backward_weight,
                        .microbatch = mb,
                        .chunk = chunk});
    Stash& stash = stashes_.at({mb, chunk});
    if (stash.head) head_backward_weight(*model_.head, *stash.head, *stash.head_keep);
    auto& blocks = model_.chunks[chunk];
    for (size_t i = 0; i < blocks.size(); ++i)
      block_backward_weight(blocks[i], stash.blocks[i], stash.blocks_keep[i]);
    if (is_first(chunk))
      model_.embedding->backward(stash.embedding_grad, microbatches_.at(mb).tokens);
    if (options_.theory) charge_theory_time(options_.theory->backward * 0.5);
    release(mb, chunk);
  }

  // This micro-batch's activations are no longer needed (once their send has left).
  void release(int mb, int chunk) {
    if (auto it = activation_sends_.find({mb, chunk}); it != activation_sends_.end()) {
      it->second.wait();
      activation_sends_.erase(it);
    }
    stashes_.erase({mb, chunk});
  }

  int64_t activation_bytes() const {
    return ctx_.allocator.stats().current[static_cast<int>(MemCategory::activations)];
  }

  StageModel& model_;
  const Schedule& schedule_;
  const std::vector<data::Batch>& microbatches_;
  comm::Comm& comm_;
  const ExecutorOptions& options_;
  RankContext& ctx_;
  std::map<Key, Stash> stashes_;
  std::map<Key, Tensor> received_activations_, received_grads_, input_grads_;
  std::map<Key, comm::Work> activation_sends_;  // in flight; their buffers live in the stashes
  comm::Work grad_send_;                        // the last gradient isend, and its buffer
  Tensor grad_send_buffer_;
  int awaiting_backward_ = 0;  // forwards whose B has not run yet (what the theory counts)
  StageStepStats stats_;
};

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

namespace {

// The body of a step, inside its window: zero_grad, the schedule, the optimizer.
StageStepStats step_body(StageModel& model, optim::Optimizer& optimizer, const Schedule& schedule,
                         const data::Batch& batch, comm::Comm& comm,
                         const ExecutorOptions& options) {
  model.zero_grad();
  StageStepStats stats = run_schedule(
      model, schedule, data::split_micro_batches(batch, schedule.microbatches), comm, options);
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

PipelineLayout::PipelineLayout(const GPTConfig& config, comm::Comm& comm, Schedule schedule,
                               int virtual_stages, const train::OptimizerFactory& make_optimizer,
                               ExecutorOptions options)
    : comm_(comm),
      stage_(
          StageModel::build(config, comm.rank(), comm.size(), virtual_stages, schedule.placement)),
      optimizer_(make_optimizer(stage_.params())),
      schedule_(std::move(schedule)),
      options_(options) {}

void PipelineLayout::before_step(int) {
  comm_.barrier();  // as in train_step: every stage starts the step together
}

train::StepOutcome PipelineLayout::step(const data::Batch& global_batch, int step) {
  stage_.zero_grad();
  ExecutorOptions options = options_;
  options.loss_scale = loss_scale();
  stats_ =
      run_schedule(stage_, schedule_,
                   data::split_micro_batches(global_batch, schedule_.microbatches), comm_, options);
  // Each stage updates only its own parameters; fp16's found-inf flag is agreed over the stages,
  // so an overflow in one stage's gradients makes every stage skip the step.
  const bool stepped = optimizer_step(optimizer_.get(), {&comm_}, step);
  if (stage_.head)  // only the stage with the head has the loss
    return {.loss = stats_.loss, .skipped = !stepped};
  return {.skipped = !stepped};
}

std::vector<train::TensorShard> PipelineLayout::shards() {
  return train::whole_tensor_shards(stage_.params(), optimizer_.get(), /*writer=*/true);
}

}  // namespace mgpu::pipeline

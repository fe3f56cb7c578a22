// A pipeline as the trainer runs it, and the step around the executor: a barrier before the step
// (stages finish a step at different times; lining them up makes each step's window, and its
// bubble, start together on the timeline), the step's window, zero_grad, the schedule, and the
// optimizer on this stage's own parameters (no communication: each stage owns its layers, but
// DualPipe's two copies of a part first sum their gradients: mirror_gradients.h).
#include "core/parallel/pipeline/layout.h"

#include "core/data/sampler.h"
#include "core/runtime/context.h"

namespace mgpu::pipeline {

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

PipelineLayout::PipelineLayout(const GPTConfig& config, comm::Comm& comm, Schedule schedule,
                               int virtual_stages, const train::OptimizerFactory& make_optimizer,
                               ExecutorOptions options)
    : comm_(comm),
      stage_(
          StageModel::build(config, comm.rank(), comm.size(), virtual_stages, schedule.placement)),
      embedding_group_(make_embedding_group(stage_, comm)),
      optimizer_(make_optimizer(stage_.params())),
      schedule_(std::move(schedule)),
      options_(options),
      mirror_(mirror_of(schedule_, comm)) {}

void PipelineLayout::before_step(int) {
  comm_.barrier();  // as in train_step: every stage starts the step together
}

train::StepOutcome PipelineLayout::step(const data::Batch& global_batch, int step) {
  stage_.zero_grad();
  ExecutorOptions options = options_;
  options.loss_scale = loss_scale();
  stats_ = run_and_mirror(stage_, schedule_, global_batch, comm_, options, mirror_.get());
  all_reduce_embedding_grad(stage_, embedding_group_.get());  // tied: the embedding group
  // Each stage updates only its own parameters; fp16's found-inf flag is agreed over the stages,
  // so an overflow in one stage's gradients makes every stage skip the step.
  const bool stepped = optimizer_step(optimizer_.get(), {&comm_}, step);
  if (stage_.head)  // only the stage with the head has the loss
    return {.loss = stats_.loss, .skipped = !stepped};
  return {.skipped = !stepped};
}

std::vector<train::TensorShard> PipelineLayout::shards() {
  // DualPipe: stages s and P-1-s hold the same parts; the lower half writes them.
  const bool writer = !mirror_ || stage_.stage < stage_.stages / 2;
  std::vector<train::TensorShard> shards =
      train::whole_tensor_shards(stage_.params(), optimizer_.get(), writer);
  read_only_tied_copy(stage_, shards);  // tied: the first stage writes the one wte
  return shards;
}

}  // namespace mgpu::pipeline

#include "lessons/precision_training.h"

#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/runtime/context.h"
#include "lessons/lesson.h"
#include "lessons/training.h"

namespace mgpu::lessons {

PrecisionRun train_precision_run(const PrecisionRunOptions& o, const data::Task& task) {
  RankContext ctx(0, 1, o.device, o.profile, ClockKind::modeled);
  ctx.allocator.set_capacity(o.capacity);
  ScopedRank installed(ctx);
  const bool phantom = !o.device.has_data();

  GPT model(o.model);
  optim::AdamWOptions adam;
  adam.lr = o.lr;
  adam.weight_decay = o.weight_decay;
  auto opt = optim::make_adamw(optim::whole_params(model.params()), o.model.dtype, adam);
  optim::LossScaler scaler(optim::LossScalerOptions{.initial_scale = o.initial_scale});

  // Building a 2-byte model rounds fp32 initial values one tensor at a time: measure from here.
  ctx.allocator.reset_peaks();
  PrecisionRun run;
  run.params = model.num_params();
  for (int step = 0; step < o.steps; ++step) {
    StepScope step_scope(step);
    data::Batch batch = task.sample(step, o.batch, o.model.seq_len);
    model.zero_grad();
    GPTActivations acts = GPTActivations::allocate(o.model, batch.B, batch.T);
    const float grad_scale = o.loss_scaling ? scaler.scale() : 1.0f;
    float loss;
    {
      ComputeScope s({.name = "forward", .cat = trace::cat::forward});
      loss = model.forward(batch.tokens, batch.targets, acts, grad_scale);
    }
    {
      ComputeScope s({.name = "backward", .cat = trace::cat::backward});
      store_counters() = {};
      model.backward(batch.tokens, acts);
      run.flushed_in_backward += store_counters().flushed_to_zero;
    }
    {
      ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
      if (o.loss_scaling)
        scaler.step(*opt);
      else
        opt->step();
    }
    run.losses.push_back(loss);
  }
  if (!phantom) {
    run.zero_weight_grads = 0;
    for (Param* p : model.params())
      for (float g : p->grad.to_vector()) run.zero_weight_grads += g == 0.0f;
    auto* mixed = dynamic_cast<optim::MixedPrecision*>(opt.get());
    for (Param* p : mixed ? mixed->master_params() : model.params())
      for (float v : p->data.to_vector()) run.final_params.push_back(v);
  }
  run.skipped_steps = scaler.skipped_steps();
  run.final_scale = o.loss_scaling ? scaler.scale() : 1.0f;
  const double steps = std::max(1, o.steps);
  run.modeled_step_seconds = ctx.clock.compute_now() / steps;
  for (const trace::Event& e : ctx.tracer.events())
    if (e.cat == trace::cat::recompute) run.recompute_seconds += e.dur / steps;
  run.memory = ctx.allocator.stats();
  return run;
}

PrecisionRunOptions precision_run_options(const CommonOptions& c, const data::Task& task) {
  auto refuse = [](bool bad, const char* what) {
    if (bad) throw UsageError(what);
  };
  refuse(c.ranks != 1,
         "this lesson trains on one rank: drop --ranks (precision and recompute "
         "are per-device choices)");
  refuse(c.device == "cuda",
         "this lesson emulates bf16/fp16 on the CPU: use --device cpu or --device phantom");
  refuse(!c.clock.empty() && c.clock != "modeled",
         "this lesson reports modeled step times: drop --clock or use --clock modeled");
  refuse(!c.checkpoint.empty() || !c.resume.empty(),
         "this lesson does not write or read checkpoints: drop --checkpoint/--resume");
  refuse(!c.trace_path.empty() || c.viz,
         "this lesson compares several runs and writes no trace: drop --trace/--viz");
  refuse(c.optimizer != "adamw", "this lesson's memory table is for AdamW: use --optimizer adamw");
  refuse(c.impl != "reference", "this lesson has no exercise implementation: drop --impl");
  WorldOptions w = c.world_options();  // validates device, profile, capacity
  PrecisionRunOptions o;
  o.model = model_config(c, task);
  o.steps = c.steps;
  o.batch = c.batch;
  o.lr = static_cast<float>(c.lr);
  o.weight_decay = static_cast<float>(c.weight_decay);
  o.profile = w.profile;
  o.device = c.device == "phantom" ? Device::phantom() : Device::cpu();
  o.capacity = w.capacity_override >= 0 ? w.capacity_override : w.profile.memory_capacity;
  return o;
}

}  // namespace mgpu::lessons

// One measured single-device run, for the lessons that compare runs of the same model side by
// side (mixed_precision, activation_checkpointing), and the options those lessons refuse.
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/parallel/single_device.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {
train::TrainResult train_measured_on(World& world, const data::Task& task,
                                     const train::TrainOptions& options, const GPTConfig& cfg,
                                     const CommonOptions& run, MeasuredRun& m) {
  return train::train(
      world, task, options,
      [&](RankContext&) {
        auto layout = parallel::single_device_layout(cfg, optimizer_factory(run));
        m.params = layout->model().num_params();
        return layout;
      },
      {},
      [&](RankContext& ctx, train::Layout& layout) {
        auto& single = static_cast<parallel::SingleDevicePart&>(
            static_cast<parallel::MeshLayout&>(layout).part());
        m.flushed_in_backward = single.backward_stores().flushed_to_zero;
        m.unchecked_stores = single.backward_stores().unchecked;
        const double steps = std::max(1, options.steps);
        m.modeled_step_seconds = ctx.clock.compute_now() / steps;
        for (const trace::Event& e : ctx.tracer.events())
          if (e.cat == trace::cat::recompute) m.recompute_seconds += e.dur / steps;
        m.memory = ctx.allocator.stats();
        if (!ctx.device.has_data()) return;
        for (train::TensorShard& shard : layout.shards())  // mixed precision: the fp32 masters
          if (shard.kind == "param")
            for (float v : shard.local.to_vector()) m.final_params.push_back(v);
      });
}
}  // namespace

MeasuredRun train_measured(const CommonOptions& c, const GPTConfig& cfg, const data::Task& task,
                           bool loss_scaling) {
  WorldOptions w = c.world_options();
  w.ranks = 1;
  w.backend = "local";
  World world(w);
  CommonOptions run = c;
  run.precision = precision_name(cfg.dtype);
  train::TrainOptions options = train_options(run, c.batch, cfg, nullptr);
  if (!loss_scaling) options.loss_scaling.reset();
  MeasuredRun m;
  train::TrainResult trained;
  try {  // one rank: its error (OutOfMemory for a batch that does not fit) is the run's
    trained = train_measured_on(world, task, options, cfg, run, m);
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
  m.losses = trained.losses;
  m.skipped_steps = trained.skipped_steps;
  m.loss_scale = trained.loss_scale == 0 ? 1.0f : trained.loss_scale;
  return m;
}

void check_side_by_side_options(const CommonOptions& c) {
  auto refuse = [](bool bad, const char* what) {
    if (bad) throw UsageError(what);
  };
  refuse(launched_by_mpi() && c.ranks != 1,
         "this lesson compares runs side by side on one rank: run it without mpirun (precision "
         "and recompute are per-device choices)");
  refuse(c.ranks != 1,
         "this lesson trains on one rank: drop --ranks (precision and recompute are per-device "
         "choices)");
  refuse(!c.clock.empty() && c.clock != "modeled",
         "this lesson reports modeled step times: drop --clock or use --clock modeled");
  refuse(!c.checkpoint.empty() || !c.resume.empty(),
         "this lesson compares several runs and writes no checkpoint: drop --checkpoint/--resume "
         "(single_device takes them with --precision and --recompute)");
  refuse(!c.trace_path.empty() || c.viz,
         "this lesson compares several runs and writes no trace: drop --trace/--viz");
  refuse(c.optimizer != "adamw", "this lesson's memory table is for AdamW: use --optimizer adamw");
  refuse(c.impl != "reference", "this lesson has no exercise implementation: drop --impl");
  c.world_options();  // validates device, profile, capacity
}

}  // namespace mgpu::lessons

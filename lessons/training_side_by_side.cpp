// One measured single-device run, for the lessons that compare runs of the same model side by
// side (mixed_precision, activation_checkpointing), and the options those lessons refuse.
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "lessons/training.h"

namespace mgpu::lessons {

MeasuredRun train_measured(const CommonOptions& c, const GPTConfig& cfg, const data::Task& task,
                           bool loss_scaling) {
  CommonOptions one = c;
  one.precision = precision_name(cfg.dtype);
  one.ranks = 1;
  one.backend = "local";
  // The task outlives the run: the spec shares it without owning it.
  run::RunSpec spec =
      run_spec(one, std::shared_ptr<const data::Task>(&task, [](auto*) {}), cfg, c.batch);
  if (!loss_scaling) spec.train.loss_scaling.reset();
  spec.parallelism = run::SingleDevice{};
  spec.train.report_ranks = true;
  spec.train.keep_params = true;
  run::RunResult ran;
  try {  // one rank: its error (OutOfMemory for a batch that does not fit) is the run's
    ran = run::run(spec);
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
  const train::RankReport& rank = ran.trained.ranks.at(0);
  const double steps = std::max(1, spec.train.steps);
  MeasuredRun m;
  m.params = rank.params_held;
  m.flushed_in_backward = rank.stores.value().flushed_to_zero;
  m.unchecked_stores = rank.stores.value().unchecked;
  m.modeled_step_seconds = rank.compute_seconds / steps;
  m.recompute_seconds = rank.recompute_seconds / steps;
  m.memory = rank.memory;
  for (const CheckpointTensor& t : ran.trained.params)  // mixed precision: the fp32 masters
    m.final_params.insert(m.final_params.end(), t.values.begin(), t.values.end());
  m.losses = ran.trained.losses;
  m.skipped_steps = ran.trained.skipped_steps;
  m.loss_scale = ran.trained.loss_scale == 0 ? 1.0f : ran.trained.loss_scale;
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

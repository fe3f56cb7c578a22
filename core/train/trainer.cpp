#include "core/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/optim/optimizer.h"
#include "core/train/checkpoint_shards.h"
#include "core/train/shared_batches.h"
#include "core/train/trainer_internal.h"

namespace mgpu::train {

using trainer_detail::check_finite;
using trainer_detail::SharedBatches;

namespace {

// Tags of the trainer's own messages, after the last step (far from any paradigm's tags).
constexpr int kLossTag = 1 << 20;
constexpr int kShardHeaderTag = kLossTag + 1;
constexpr int kShardDataTag = kLossTag + 2;
constexpr int kReportTag = kLossTag + 3;

// The bookkeeping after training (loss log, checkpoint gather) is not part of the lesson: it
// leaves no events on the timeline, so a run with --checkpoint draws the same trace as one without.
class UntracedScope {
 public:
  explicit UntracedScope(RankContext& ctx) : ctx_(ctx), was_(ctx.tracer.enabled) {
    ctx.tracer.enabled = false;
  }
  ~UntracedScope() { ctx_.tracer.enabled = was_; }
  UntracedScope(const UntracedScope&) = delete;
  UntracedScope& operator=(const UntracedScope&) = delete;

 private:
  RankContext& ctx_;
  bool was_;
};

// One step's outcome on one rank, as four floats: has loss, loss, has shard loss, shard loss.
constexpr int kOutcomeFloats = 4;
void append_outcome(std::vector<float>& out, const StepOutcome& o) {
  out.insert(out.end(), {o.loss ? 1.0f : 0.0f, o.loss.value_or(0), o.shard_loss ? 1.0f : 0.0f,
                         o.shard_loss.value_or(0)});
}

// The global loss of each step from every rank's outcomes: the lowest rank that knows it, or
// the mean of the equal shards' losses.
std::vector<float> global_losses(const std::vector<std::vector<float>>& per_rank, int steps) {
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::optional<float> global;
    double shard_sum = 0;
    int shards = 0;
    for (const auto& rank : per_rank) {
      const float* o = rank.data() + kOutcomeFloats * s;
      if (o[0] != 0 && !global) global = o[1];
      if (o[2] != 0) shard_sum += o[3], ++shards;
    }
    losses.push_back(global ? *global : static_cast<float>(shards ? shard_sum / shards : 0.0));
  }
  return losses;
}

// The parameters among a checkpoint's tensors (not the optimizer's state).
std::vector<CheckpointTensor> model_params(std::vector<CheckpointTensor> tensors) {
  std::erase_if(tensors, [](const CheckpointTensor& t) { return t.kind != "param"; });
  return tensors;
}

// Restores a rank's clock on leaving: what it wraps takes no modeled time.
class ClockHold {
 public:
  explicit ClockHold(RankClock& clock) : clock_(clock), saved_(clock) {}
  ~ClockHold() { clock_ = saved_; }
  ClockHold(const ClockHold&) = delete;
  ClockHold& operator=(const ClockHold&) = delete;

 private:
  RankClock& clock_;
  RankClock saved_;
};

// One training run: what every rank shares (options, the resumed checkpoint, the result, the
// batches) and what each rank does: set up -> steps -> loss log and checkpoint to rank 0.
class TrainingRun {
 public:
  TrainingRun(World& world, const data::Task& task, const TrainOptions& options,
              const CheckpointContents& resume, TrainResult& result, const LossCallback& on_loss)
      : world_(world),
        options_(options),
        resume_(resume),
        result_(result),
        on_loss_(on_loss),
        first_(result.first_step),
        steps_run_(options.steps - result.first_step),
        reported_(static_cast<size_t>(std::max(steps_run_, 0)), false),
        batches_(task, options, static_cast<int>(world.local_ranks().size())) {
    if (options.report_ranks && world.is_root()) result.ranks.resize(world.size());
    if (options.keep_params && !world.is_mpi()) param_shards_.resize(world.size());
  }

  void on_rank(RankContext& ctx, const LayoutFactory& factory, const RankDone& on_done) {
    std::unique_ptr<Layout> layout = set_up(ctx, factory);
    std::vector<float> outcomes;  // 4 floats per step (append_outcome)
    std::vector<int> skipped;
    for (int step = first_; step < options_.steps; ++step) {
      const StepOutcome outcome = run_step(*layout, step);
      if (outcome.skipped) skipped.push_back(step);
      append_outcome(outcomes, outcome);
      if (periodic_checkpoint(step + 1)) {
        UntracedScope untraced(ctx);
        gather_checkpoint(ctx, *layout, step + 1);
        ctx.comm->barrier();  // written before any rank goes on (and may be lost: --fail-rank)
      }
      if (outcome.loss && on_loss_ && world_.is_root()) {
        std::lock_guard lock(mutex_);
        if (!reported_[step - first_])
          reported_[step - first_] = true, on_loss_(step, *outcome.loss);
      }
    }
    if (on_done) on_done(ctx, *layout);
    std::optional<RankReport> report;  // measured now, handed back last
    if (options_.report_ranks) {
      report = measured_report(ctx);
      layout->report(*report);
    }
    // Every rank skipped the same steps. (Phantom devices hold no values: nothing overflows, so
    // there is nothing to report.)
    if (ctx.rank == 0 && layout->loss_scaler() && ctx.device.has_data()) {
      std::lock_guard lock(mutex_);
      result_.skipped_steps = skipped;
      result_.loss_scale = layout->loss_scaler()->scale();
    }
    UntracedScope untraced(ctx);
    gather_losses(ctx, outcomes);
    if (!options_.checkpoint.empty()) gather_checkpoint(ctx, *layout, options_.steps);
    // Last, and off the clock: in-process ranks hand these over in memory, mpirun's by the comm,
    // and both must leave the same timeline.
    ClockHold hold(ctx.clock);
    if (report) collect_report(ctx, std::move(*report));
    if (options_.keep_params && ctx.device.has_data()) collect_params(ctx, *layout);
  }

  // In-process ranks' trained parameters, placed into the full model on the root.
  void assemble_params() {
    if (!options_.keep_params || world_.is_mpi() || param_shards_.empty()) return;
    if (param_shards_.front().first.empty()) return;  // phantom: no values
    result_.params = model_params(assemble(param_shards_));
  }

  // Steps whose loss only the gather told: reported now, in order.
  void report_the_rest() const {
    if (!on_loss_ || !world_.is_root()) return;
    for (int s = 0; s < steps_run_ && s < static_cast<int>(result_.losses.size()); ++s)
      if (!reported_[s]) on_loss_(first_ + s, result_.losses[s]);
  }

 private:
  std::unique_ptr<Layout> set_up(RankContext& ctx, const LayoutFactory& factory) {
    std::unique_ptr<Layout> layout = factory(ctx);
    if (options_.loss_scaling) layout->enable_loss_scaling(*options_.loss_scaling);
    if (options_.resume.empty()) return layout;
    restore_shards(*layout, resume_, options_.resume);
    if (ctx.rank == 0 && resume_.info.optimizer.is_null() && layout->optimizer()) {
      std::lock_guard lock(mutex_);
      result_.fresh_optimizer = true;
    }
    return layout;
  }

  StepOutcome run_step(Layout& layout, int step) {
    const std::shared_ptr<const data::Batch> batch = batches_.take(step);
    layout.before_step(step);
    StepOutcome outcome;
    const optim::LossScaler* scaler = layout.loss_scaler();
    const int64_t skipped_before = scaler ? scaler->skipped_steps() : 0;
    const int64_t calls_before = layout.optimizer_steps_called();
    {
      StepScope scope(step);
      outcome = layout.step(*batch, step);
    }
    if (scaler && layout.optimizer_steps_called() == calls_before)
      throw std::invalid_argument(fmt::format(
          "--precision fp16 needs dynamic loss scaling, which the {} layout does not run yet "
          "(train::Layout::optimizer_step): use --precision bf16 (same memory, no scaler)",
          layout.name()));
    if (scaler && scaler->skipped_steps() > skipped_before) outcome.skipped = true;
    check_finite(step, outcome, layout, options_, resume_);
    return outcome;
  }

  // The loss log, gathered to rank 0.
  void gather_losses(RankContext& ctx, const std::vector<float>& outcomes) {
    comm::Comm& comm = *ctx.comm;
    if (!ctx.device.has_data()) {
      if (ctx.rank == 0) result_.losses.assign(static_cast<size_t>(steps_run_), 0.0f);  // timing
      return;
    }
    if (ctx.rank != 0) return comm::send_values(comm, outcomes, 0, kLossTag);
    std::vector<std::vector<float>> per_rank{outcomes};
    for (int r = 1; r < comm.size(); ++r)
      per_rank.push_back(comm::recv_values<float>(comm, r, kLossTag));
    std::lock_guard lock(mutex_);
    result_.losses = global_losses(per_rank, steps_run_);
  }

  // In-process ranks hand their report over in memory, so the clock and the trace stay as they
  // are without it; under mpirun it travels to rank 0, off the timeline.
  void collect_report(RankContext& ctx, RankReport report) {
    if (!world_.is_mpi()) {
      std::lock_guard lock(mutex_);
      result_.ranks.at(ctx.rank) = std::move(report);
      return;
    }
    std::vector<RankReport> all = gather_reports(*ctx.comm, report, kReportTag);
    if (ctx.rank == 0) result_.ranks = std::move(all);
  }

  // The trained parameters: in memory between in-process ranks (assemble_params), through the
  // comm under mpirun.
  void collect_params(RankContext& ctx, Layout& layout) {
    if (!world_.is_mpi()) {
      auto mine = describe_writer_shards(layout);
      std::lock_guard lock(mutex_);
      param_shards_.at(ctx.rank) = std::move(mine);
      return;
    }
    const auto per_rank = gather_writer_shards(*ctx.comm, layout, kShardHeaderTag, kShardDataTag);
    if (ctx.rank == 0) result_.params = model_params(assemble(per_rank));
  }

  // --checkpoint-every: after `done` steps, before the end (which writes it anyway).
  bool periodic_checkpoint(int done) const {
    return options_.checkpoint_every > 0 && !options_.checkpoint.empty() &&
           done % options_.checkpoint_every == 0 && done < options_.steps;
  }

  // The full model after `done` steps, gathered to rank 0 and written there.
  void gather_checkpoint(RankContext& ctx, Layout& layout, int done) {
    const auto per_rank = gather_writer_shards(*ctx.comm, layout, kShardHeaderTag, kShardDataTag);
    if (ctx.rank != 0) return;
    nlohmann::json hyper = nullptr;
    if (const optim::Optimizer* opt = layout.optimizer()) {
      hyper = opt->hyperparams();
      hyper["step_count"] = opt->step_count();
    }
    if (const optim::LossScaler* scaler = layout.loss_scaler())
      hyper["loss_scaler"] = scaler->state();
    save_checkpoint_tensors(options_.checkpoint, assemble(per_rank), done, options_.config, hyper,
                            options_.model);
    result_.checkpoint_written = true;
  }

  World& world_;
  const TrainOptions& options_;
  const CheckpointContents& resume_;
  TrainResult& result_;
  const LossCallback& on_loss_;
  const int first_, steps_run_;
  std::mutex mutex_;
  std::vector<bool> reported_;  // steps whose loss on_loss has seen
  SharedBatches batches_;
  std::vector<std::pair<std::string, std::vector<float>>> param_shards_;  // keep_params, by rank
};

// A rank lost to --fail-rank ends the job with one line: the rank, the step and the checkpoint
// the job can resume from (the last --checkpoint-every one before the step, or the run's own
// --resume). Other errors pass through.
void rethrow_lost_rank(const RankError& e, const TrainOptions& options, int first_step) {
  try {
    if (e.cause()) std::rethrow_exception(e.cause());
  } catch (const RankLost& lost) {
    const int every = options.checkpoint_every;
    const int saved = every > 0 && !options.checkpoint.empty() ? lost.step() / every * every : 0;
    std::string from = "no checkpoint to resume from (add --checkpoint FILE --checkpoint-every N)";
    if (saved > first_step)
      from = fmt::format("last checkpoint {} at step {}: resume with --resume {}",
                         options.checkpoint, saved, options.checkpoint);
    else if (!options.resume.empty())
      from = fmt::format("last checkpoint {} at step {}: resume with --resume {}", options.resume,
                         first_step, options.resume);
    throw JobInterrupted(lost.rank(), lost.step(), std::max(saved, first_step),
                         fmt::format("{}; {}", lost.what(), from));
  } catch (...) {
  }
}

}  // namespace

void check_checkpoint_device(DeviceKind device, const TrainOptions& options) {
  if (device == DeviceKind::phantom && !options.checkpoint.empty())
    throw std::invalid_argument(
        "--checkpoint needs parameter values, and the phantom device has none: drop --checkpoint "
        "or use --device cpu");
}

TrainResult train(World& world, const data::Task& task, const TrainOptions& options,
                  const LayoutFactory& factory, const LossCallback& on_loss,
                  const RankDone& on_done) {
  check_checkpoint_device(world.options().device, options);
  CheckpointContents resume;
  TrainResult result;
  if (!options.resume.empty()) {
    resume = read_resume_checkpoint(options);
    result.first_step = static_cast<int>(resume.info.step);
  }
  TrainingRun run(world, task, options, resume, result, on_loss);
  try {
    world.run([&](RankContext& ctx) { run.on_rank(ctx, factory, on_done); });
  } catch (const RankError& e) {
    rethrow_lost_rank(e, options, result.first_step);
    throw;
  }
  run.assemble_params();
  run.report_the_rest();
  return result;
}

}  // namespace mgpu::train

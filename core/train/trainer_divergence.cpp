// Divergence: a non-finite loss or parameter after a step stops the run, with a sentence on what
// most likely caused it (the option to change, or the checkpoint it resumed from).
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/optim/optimizer.h"
#include "core/train/trainer.h"
#include "core/train/trainer_internal.h"

namespace mgpu::train {

namespace {

// What most likely made a run diverge, from the optimizer's hyper-parameters and the state it
// resumed from (the usual ranges are those of small GPT training; Loshchilov & Hutter 2019).
std::string likely_cause(Layout& layout, const TrainOptions& options,
                         const CheckpointContents& resumed) {
  if (const optim::Optimizer* opt = layout.optimizer()) {
    const nlohmann::json h = opt->hyperparams();
    const double lr = h.value("lr", 0.0), wd = h.value("weight_decay", 0.0);
    if (lr > 0.1) return fmt::format("--lr {:g} is far above the usual 1e-4..1e-2", lr);
    if (wd > 1.0 || lr * wd > 0.1)
      return fmt::format("--weight-decay {:g} is far above the usual 0..0.1", wd);
  }
  float largest = 0;
  for (const CheckpointTensor& t : resumed.tensors)
    for (float v : t.values) largest = std::max(largest, std::abs(v));
  if (!options.resume.empty() && largest > 1e6f)
    return fmt::format("the checkpoint it resumed from, '{}', holds values up to {:g}",
                       options.resume, largest);
  return "the learning rate is too high for this model and data: try a smaller --lr";
}

}  // namespace

namespace trainer_detail {

// After a step: a non-finite loss this rank knows, or after the last step a non-finite parameter
// this rank holds, stops the run. A parameter made NaN or inf by an update shows in the next
// step's loss (the forward reads every parameter), so only the last update, which no forward
// follows, needs the parameters themselves read back: no per-step copy of the model. A rank that
// stops first ends the others' waits (World::run). A skipped fp16 step changed no parameter, but
// its loss is still checked: the forward pass is not scaled, so a non-finite loss means the
// weights themselves overflowed, which halving the loss scale cannot undo.
void check_finite(int step, const StepOutcome& outcome, Layout& layout, const TrainOptions& options,
                  const CheckpointContents& resumed) {
  std::string what;
  for (const std::optional<float>& loss : {outcome.loss, outcome.shard_loss})
    if (loss && !std::isfinite(*loss)) what = fmt::format("the loss is {}", *loss);
  const bool last_step = step + 1 == options.steps;
  if (what.empty() && !outcome.skipped && last_step)
    for (TensorShard& shard : layout.shards()) {
      if (shard.kind != "param" || !shard.local.has_data()) continue;
      const std::vector<float> values = shard.local.to_vector();
      if (!std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); })) {
        what = fmt::format("parameter '{}' holds NaN or inf after the update", shard.full_name);
        break;
      }
    }
  if (what.empty()) return;
  throw TrainingDiverged(
      fmt::format("training diverged at step {}: {}; likely cause: {} (no checkpoint written)",
                  step + 1, what, likely_cause(layout, options, resumed)));
}

}  // namespace trainer_detail

}  // namespace mgpu::train

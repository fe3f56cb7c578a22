// The ZeRO lesson's run: --ranks data-parallel ranks train at one stage; every rank reports its
// memory by category and the parameter elements it owns (RankReport, its ZeRO figures).
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/model_states.h"
#include "exercises/selection.h"
#include "lessons/ddp.h"
#include "lessons/training.h"
#include "lessons/zero.h"
#include "lessons/zero_internal.h"

namespace mgpu::lessons {

// ---- the run -------------------------------------------------------------------------------

ZeroRunResult train_zero(const CommonOptions& c, const parallel::ZeroOptions& options,
                         std::ostream& out) {
  const int global_batch = resolve_global_batch(c, DataParallelOptions{});
  std::shared_ptr<const data::Task> task = make_task(c);
  const GPTConfig cfg = model_config(c, *task);
  run::RunSpec spec = run_spec(c, task, cfg, global_batch);
  spec.parallelism = run::Zero{.options = options, .seams = ex::selected_seams().zero};
  spec.train.report_ranks = true;
  ZeroRunResult result;
  result.params = count_params(cfg);
  result.param_bytes = static_cast<int>(dtype_size(cfg.dtype));
  const theory::StateBytes b = detail::state_bytes(c, result.param_bytes);
  const double psi = static_cast<double>(result.params), n = c.ranks;
  spec.trace_meta = {
      {"lesson", "zero"},
      {"config", c.to_json()},
      {"zero", {{"stage", options.stage}, {"prefetch", options.prefetch}}},
      {"predictions",
       {{"model_state_bytes_per_rank", theory::zero_model_states(options.stage, b, psi, n).total()},
        {"bytes_sent_per_rank", theory::zero_bytes_sent(options.stage, b, psi, n)}}}};
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, result.params));
    fmt::print(out,
               "shards: every layer (the embedding, each block, the head) is one flat unit, cut "
               "into {} consecutive chunks\n        (the first n % {} ranks one element more); "
               "rank r updates only its chunk\n",
               c.ranks, c.ranks);
    fmt::print(out, "data:   global batch {} = {} per rank x {} ranks\n", global_batch,
               global_batch / c.ranks, c.ranks);
    fmt::print(out, "device: {}\n\n", describe_world(spec.world));
  }
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  const train::TrainResult& trained = ran.trained;
  for (const train::RankReport& rank : trained.ranks) {
    result.peak.push_back(rank.memory.peak);
    result.settled.push_back(rank.memory.current);
    result.owned.push_back(rank.params_updated);
    result.largest_unit = rank.zero.value().largest_unit;
  }
  result.losses = trained.losses;
  result.first_step = trained.first_step;
  result.checkpoint_written = trained.checkpoint_written;
  result.fresh_optimizer = trained.fresh_optimizer;
  result.skipped_steps = trained.skipped_steps;
  result.loss_scale = trained.loss_scale;
  result.trace = std::move(ran.trace);
  return result;
}

}  // namespace mgpu::lessons

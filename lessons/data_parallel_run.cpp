// The runner the data-parallel lessons share (data_parallel, ddp, grad_accum, and the tests):
// the global batch sharded over the ranks, naive or DDP, and the single-device run beside it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "core/data/sampler.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/ddp.h"
#include "lessons/host_memory_check.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

// The trained model's parameters in order (the fp32 masters under mixed precision; none on the
// phantom device).
std::vector<std::vector<float>> values_of(std::vector<CheckpointTensor> params) {
  std::vector<std::vector<float>> values;
  for (CheckpointTensor& t : params) values.push_back(std::move(t.values));
  return values;
}

int64_t gradient_bytes_of(const GPTConfig& cfg) {
  return 4 * count_params(cfg);
}

}  // namespace

DataParallelResult train_data_parallel(const CommonOptions& c, const DataParallelOptions& d,
                                       std::ostream& out) {
  DataParallelResult result;
  result.global_batch = resolve_global_batch(c, d);
  std::shared_ptr<const data::Task> task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  if (!d.naive) check_replicas_fit_host(c, cfg);  // every rank holds the model and its AdamW
  result.gradient_bytes = gradient_bytes_of(cfg);
  result.bucket_bytes = resolve_bucket_bytes(d, result.gradient_bytes);
  if (d.naive && d.accum != 1) throw UsageError("data_parallel runs without --accum: use ddp");

  run::RunSpec spec = run_spec(c, task, cfg, result.global_batch);
  if (d.naive)
    spec.parallelism = run::NaiveDataParallel{};
  else
    spec.parallelism =
        run::DataParallel{.options = {.overlap = d.overlap, .bucket_bytes = result.bucket_bytes},
                          .accum = d.accum,
                          .same_shard = d.planted_same_shard,
                          .seams = ex::selected_seams().ddp};
  spec.train.report_ranks = true;
  spec.train.keep_params = true;
  const double n = spec.world.ranks;
  spec.trace_meta =
      nlohmann::json{{"lesson", d.naive ? "data_parallel" : (d.accum > 1 ? "grad_accum" : "ddp")},
                     {"config", c.to_json()},
                     {"data_parallel",
                      {{"mode", d.naive ? "naive" : "ddp"},
                       {"overlap", d.overlap},
                       {"bucket_bytes", result.bucket_bytes},
                       {"buckets", result.buckets},
                       {"accum", d.accum},
                       {"global_batch", result.global_batch}}},
                     {"predictions",
                      {{"gradient_bytes", result.gradient_bytes},
                       {"bytes_per_rank",
                        d.naive ? 0.0 : theory::ring_all_reduce_factor(n) * result.gradient_bytes},
                       {"ideal_speedup", n}}}};
  LossLog log(c, out);
  auto wall_start = std::chrono::steady_clock::now();
  run::RunResult ran = run::run(spec, [&](int step, float loss) {
    if (d.log_losses) log.record(step, loss);
  });
  const train::TrainResult& trained = ran.trained;
  std::vector<data::Batch> last_shards;
  for (const train::RankReport& rank : trained.ranks)
    if (rank.ddp) last_shards.push_back(rank.ddp->last_shard);
  if (!trained.ranks.empty() && trained.ranks.front().ddp)
    result.buckets = trained.ranks.front().ddp->buckets;
  result.params = values_of(std::move(ran.trained.params));
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (d.log_losses) print_loss_scaling(out, trained);  // not for the comparison runs
  result.losses = trained.losses;
  result.first_step = trained.first_step;
  result.checkpoint_written = trained.checkpoint_written;
  result.fresh_optimizer = trained.fresh_optimizer;
  if (!d.naive && !ran.mpi && trained.first_step < c.steps)
    result.shard_problem = data::check_shards_partition(
        task->sample(c.steps - 1, result.global_batch, c.seq), last_shards);

  result.trace = std::move(ran.trace);
  result.trace.metadata["data_parallel"]["buckets"] = result.buckets;  // known after the run
  if (ran.root) {  // under mpirun the merged trace is on the root process only
    trace::Interval w = trace::analysis_window(result.trace, c.steps - 1);
    result.step_seconds = w.end - w.begin;
  }
  return result;
}

std::vector<std::vector<float>> train_single_device_params(const CommonOptions& c,
                                                           int global_batch) {
  CommonOptions one = c;
  one.ranks = 1;
  one.backend = "local";  // under mpirun: this process alone, no collectives the others skip
  one.checkpoint.clear();
  std::shared_ptr<const data::Task> task = make_task(one);
  const GPTConfig cfg = model_config(one, *task);
  run::RunSpec spec = run_spec(one, task, cfg, global_batch);
  spec.parallelism = run::SingleDevice{};
  spec.train.keep_params = true;
  return values_of(run::run(spec).trained.params);
}

float max_param_difference(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, std::abs(a[i][j] - b[i][j]));
  }
  return worst;
}

}  // namespace mgpu::lessons

// The runner the data-parallel lessons share (data_parallel, ddp, grad_accum, and the tests):
// the global batch sharded over the ranks, naive or DDP, and the single-device run beside it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <ostream>

#include <fmt/format.h>

#include "core/data/sampler.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/ddp.h"
#include "core/parallel/single_device.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/ddp.h"
#include "lessons/host_memory_check.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

std::vector<std::vector<float>> copy_params(GPT& model) {
  std::vector<std::vector<float>> values;
  for (Param* p : model.params())
    if (p->data.has_data())                   // phantom parameters have no values to compare
      values.push_back(p->data.to_vector());  // bf16/fp16 parameters read as floats
  return values;
}

int64_t gradient_bytes_of(const GPTConfig& cfg) {
  return 4 * count_params(cfg);
}

}  // namespace

DataParallelResult train_data_parallel(const CommonOptions& c, const DataParallelOptions& d,
                                       std::ostream& out) {
  WorldOptions wopt = c.world_options();
  DataParallelResult result;
  result.global_batch = resolve_global_batch(c, d);
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  if (!d.naive) check_replicas_fit_host(c, cfg);  // every rank holds the model and its AdamW
  result.gradient_bytes = gradient_bytes_of(cfg);
  result.bucket_bytes = resolve_bucket_bytes(d, result.gradient_bytes);
  if (d.naive && d.accum != 1) throw UsageError("data_parallel runs without --accum: use ddp");

  World world(wopt);
  const int ranks = world.size();
  std::vector<data::Batch> last_shards(ranks);
  std::mutex mutex;
  LossLog log(c, out);
  auto wall_start = std::chrono::steady_clock::now();
  train::LayoutFactory factory = [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
    if (d.naive)
      return std::make_unique<parallel::DataParallelLayout>(cfg, *ctx.comm, optimizer_factory(c));
    int shard = d.planted_same_shard ? 0 : ctx.rank;  // the planted bug: every rank uses shard 0
    return parallel::ddp_layout(
        cfg, *ctx.comm,
        parallel::DdpOptions{.overlap = d.overlap, .bucket_bytes = result.bucket_bytes}, d.accum,
        optimizer_factory(c), shard, ex::selected_seams().ddp);
  };
  train::TrainResult trained = train::train(
      world, *task, train_options(c, result.global_batch, cfg), factory,
      [&](int step, float loss) {
        if (d.log_losses) log.record(step, loss);
      },
      [&](RankContext& ctx, train::Layout& layout) {
        std::lock_guard lock(mutex);
        if (auto* mesh = dynamic_cast<parallel::MeshLayout*>(&layout)) {
          const auto& ddp = dynamic_cast<const parallel::DdpPart&>(mesh->part());
          if (ctx.rank == 0) result.buckets = static_cast<int>(ddp.ddp().plan().buckets.size());
          last_shards[ctx.rank] = ddp.last_shard();
          if (ctx.rank == 0) result.params = copy_params(mesh->model());
        } else if (auto* dp = dynamic_cast<parallel::DataParallelLayout*>(&layout)) {
          if (ctx.rank == 0) result.params = copy_params(dp->model());
        }
      });
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (d.log_losses) print_loss_scaling(out, trained);  // not for the comparison runs
  result.losses = trained.losses;
  result.first_step = trained.first_step;
  result.checkpoint_written = trained.checkpoint_written;
  result.fresh_optimizer = trained.fresh_optimizer;
  if (!d.naive && !world.is_mpi() && trained.first_step < c.steps)
    result.shard_problem = data::check_shards_partition(
        task->sample(c.steps - 1, result.global_batch, c.seq), last_shards);

  double n = ranks;
  nlohmann::json meta = {
      {"lesson", d.naive ? "data_parallel" : (d.accum > 1 ? "grad_accum" : "ddp")},
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
  result.trace = world.collect_trace(meta);
  if (world.is_root()) {  // under mpirun the merged trace is on the root process only
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
  World world(one.world_options());
  auto task = make_task(one);
  GPTConfig cfg = model_config(one, *task);
  std::vector<std::vector<float>> params;
  train::train(
      world, *task, train_options(one, global_batch, cfg),
      [&](RankContext&) { return parallel::single_device_layout(cfg, optimizer_factory(one)); }, {},
      [&](RankContext&, train::Layout& layout) {
        params = copy_params(static_cast<parallel::MeshLayout&>(layout).model());
      });
  return params;
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

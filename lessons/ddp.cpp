// Lesson 3 — DDP, and the runner the data-parallel lessons share. Every rank holds a replica,
// trains on its own shard of the global batch and averages gradients with all-reduce; with
// buckets, each all-reduce starts while backward is still running on earlier layers, so most of
// the communication hides behind compute. The lesson prints how much (overlap %, exposed comm),
// the bytes each rank all-reduces beside the ring formula 2(N-1)/N x gradient bytes, and the
// speedup over one rank on the same hardware profile.
#include "lessons/ddp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/data/sampler.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/ddp.h"
#include "core/trace/analysis.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

std::vector<std::vector<float>> copy_params(GPT& model) {
  std::vector<std::vector<float>> values;
  for (Param* p : model.params())
    if (p->data.has_data())  // phantom parameters have no values to compare
      values.emplace_back(p->data.f32(), p->data.f32() + p->data.numel());
  return values;
}

int64_t gradient_bytes_of(const GPTConfig& cfg) {
  return 4 * count_params(cfg);
}

// One DDP optimizer step on this rank: k micro-steps, communicating only on the last (no_sync).
float ddp_step(parallel::DistributedDataParallel& ddp, GPT& model, optim::Optimizer& opt,
               const data::Batch& shard, int accum) {
  model.zero_grad();
  float loss = 0;
  std::vector<data::Batch> micro = data::split_micro_batches(shard, accum);
  for (int m = 0; m < accum; ++m) {
    bool last = m + 1 == accum;  // earlier micro-steps only accumulate locally
    loss += ddp.forward_backward(micro[m], /*sync=*/last, 1.0f / accum) / accum;
  }
  ddp.wait_for_gradients();
  ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
  opt.step();
  return loss;
}

}  // namespace

int resolve_global_batch(const CommonOptions& c, const DataParallelOptions& d) {
  if (d.accum <= 0) throw UsageError(fmt::format("--accum must be at least 1, got {}", d.accum));
  int parts = c.ranks * d.accum;
  if (d.batch_per_rank > 0) return d.batch_per_rank * parts;
  if (c.batch % parts != 0) {
    int below = c.batch / parts * parts, above = below + parts;
    throw UsageError(
        fmt::format("global batch {} is not divisible by {} ranks x {} accumulation steps: use {}",
                    c.batch, c.ranks, d.accum,
                    below > 0 ? fmt::format("{} or {}", below, above) : std::to_string(above)));
  }
  return c.batch;
}

int64_t resolve_bucket_bytes(const DataParallelOptions& d, int64_t gradient_bytes) {
  if (d.bucket_mb == "auto") return std::max<int64_t>(1, (gradient_bytes + 3) / 4);
  double mb = 0;
  try {
    size_t used = 0;
    mb = std::stod(d.bucket_mb, &used);
    if (used != d.bucket_mb.size()) mb = 0;
  } catch (const std::exception&) {
  }
  if (!(mb > 0))
    throw UsageError(fmt::format(
        "--bucket-mb must be a positive size in MB or 'auto', got '{}': try 0.05", d.bucket_mb));
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(mb * 1e6)));
}

DataParallelResult train_data_parallel(const CommonOptions& c, const DataParallelOptions& d,
                                       std::ostream& out) {
  (void)out;  // the runner is quiet; the lessons narrate its result
  WorldOptions wopt = c.world_options();
  DataParallelResult result;
  result.global_batch = resolve_global_batch(c, d);
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  result.gradient_bytes = gradient_bytes_of(cfg);
  result.bucket_bytes = resolve_bucket_bytes(d, result.gradient_bytes);
  if (d.naive && d.accum != 1) throw UsageError("data_parallel runs without --accum: use ddp");

  World world(wopt);
  const int ranks = world.size();
  std::vector<std::vector<float>> losses(ranks);  // per rank, per step (shard means)
  std::vector<data::Batch> last_shards(ranks);
  auto wall_start = std::chrono::steady_clock::now();
  world.run([&](RankContext& ctx) {
    GPT model(cfg);  // same seed on every rank: the replicas start identical
    if (d.naive) {
      parallel::DataParallel dp(model, *ctx.comm);
      auto opt = ctx.rank == 0 ? make_optimizer(c, model.params()) : nullptr;
      for (int step = 0; step < c.steps; ++step) {
        StepScope scope(step);
        data::Batch global;
        if (ctx.rank == 0) global = task->sample(step, result.global_batch, c.seq);
        losses[ctx.rank].push_back(dp.step(ctx.rank == 0 ? &global : nullptr, opt.get()));
      }
    } else {
      parallel::DistributedDataParallel ddp(
          model, *ctx.comm, {.overlap = d.overlap, .bucket_bytes = result.bucket_bytes});
      auto opt = make_optimizer(c, model.params());  // after DDP: grads are bucket views now
      int sampler_rank = d.planted_same_shard ? 0 : ctx.rank;  // the planted bug: all use shard 0
      data::ShardedSampler sampler(*task, result.global_batch, c.seq, sampler_rank, ranks);
      if (ctx.rank == 0) result.buckets = static_cast<int>(ddp.plan().buckets.size());
      for (int step = 0; step < c.steps; ++step) {
        StepScope scope(step);
        data::Batch shard = sampler.shard(step);
        losses[ctx.rank].push_back(ddp_step(ddp, model, *opt, shard, d.accum));
        if (step + 1 == c.steps) last_shards[ctx.rank] = shard;
      }
    }
    if (ctx.rank == 0) result.params = copy_params(model);
  });
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  for (int step = 0; step < c.steps; ++step) {  // equal shards: mean of means = global mean
    double sum = 0;
    int counted = 0;  // under MPI this process only holds its own rank's losses
    for (int r = 0; r < ranks; ++r)
      if (step < static_cast<int>(losses[r].size())) sum += losses[r][step], ++counted;
    if (d.naive && !losses[0].empty())
      sum = losses[0][step], counted = 1;  // the driver's is global
    result.losses.push_back(static_cast<float>(sum / std::max(counted, 1)));
  }
  if (!d.naive && !world.is_mpi())
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
        {"bytes_per_rank", d.naive ? 0.0 : 2 * (n - 1) / n * result.gradient_bytes},
        {"ideal_speedup", n}}}};
  result.trace = world.collect_trace(meta);
  trace::Interval w = trace::analysis_window(result.trace, c.steps - 1);
  result.step_seconds = w.end - w.begin;
  return result;
}

std::vector<std::vector<float>> train_single_device_params(const CommonOptions& c,
                                                           int global_batch) {
  CommonOptions one = c;
  one.ranks = 1;
  World world(one.world_options());
  auto task = make_task(one);
  GPTConfig cfg = model_config(one, *task);
  std::vector<std::vector<float>> params;
  world.run([&](RankContext&) {
    GPT model(cfg);
    auto opt = make_optimizer(one, model.params());
    for (int step = 0; step < one.steps; ++step) {
      model.zero_grad();
      data::Batch batch = task->sample(step, global_batch, one.seq);
      model.forward_backward(batch.tokens, batch.targets, batch.B, batch.T);
      opt->step();
    }
    params = copy_params(model);
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

void add_data_parallel_options(CLI::App& app, DataParallelOptions& d, bool ddp_options,
                               bool accum_option) {
  if (ddp_options) {
    app.add_option("--overlap", d.overlap,
                   "on: bucketed all-reduce during backward; off: one all-reduce per tensor after")
        ->default_str("on");  // CLI11 reads on/off (and true/false, 1/0) as a bool
    app.add_option("--bucket-mb", d.bucket_mb,
                   "gradient bucket cap in MB (1e6 B), or auto = a quarter of the gradients")
        ->capture_default_str();
  }
  if (accum_option)
    app.add_option("--accum", d.accum, "micro-steps per optimizer step (gradient accumulation)")
        ->capture_default_str();
  app.add_option("--batch-per-rank", d.batch_per_rank,
                 "sequences per rank per micro-step; sets --batch to this x ranks x accum")
      ->check(CLI::NonNegativeNumber);
}

// ---- the lesson ----------------------------------------------------------------------------

namespace {

void print_ddp_report(std::ostream& out, const CommonOptions& c, const DataParallelOptions& d,
                      const DataParallelResult& r, double one_rank_step) {
  trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
  const trace::RankSummary& r0 = s.ranks.at(0);
  double n = c.ranks;
  int64_t measured = r0.bytes_sent;  // sum of all-reduce buffer sizes in the step, rank 0
  print_loss_summary(out, c, r.losses, " (mean over the global batch)");
  fmt::print(out, "gradient sync, rank 0, last step:\n");
  fmt::print(out, "  all-reduced      {} B per step (gradient bytes 4 x params = {} B){}\n",
             with_commas(measured), with_commas(r.gradient_bytes),
             measured == r.gradient_bytes ? "" : "  <- differs!");
  fmt::print(out,
             "  ring traffic     2(N-1)/N x {} B = {} B sent per rank (the same for any N > 1)\n",
             with_commas(r.gradient_bytes),
             with_commas(static_cast<int64_t>(2 * (n - 1) / n * double(measured))));
  fmt::print(out, "  comm {} of which hidden behind backward {} ({:.1f}% overlap), exposed {}\n",
             format_seconds(r0.comm), format_seconds(r0.overlap), 100 * r0.overlap_fraction,
             format_seconds(r0.exposed_comm));
  fmt::print(out,
             "  step {} on {} ranks vs {} on 1 rank (same profile, same global batch): "
             "speedup {:.2f}x (ideal {}x)\n",
             format_seconds(r.step_seconds), c.ranks, format_seconds(one_rank_step),
             one_rank_step / r.step_seconds, c.ranks);
  if (one_rank_step / r.step_seconds < 0.7 * n) {
    if (r0.exposed_comm > 0.5 * r.step_seconds)
      fmt::print(out,
                 "  (far from ideal: communication-bound. {} of the {} step waits for the link; "
                 "compute per rank is too\n   small to hide it. Larger batches per rank or "
                 "a faster link help, more ranks do not.)\n",
                 format_seconds(r0.exposed_comm), format_seconds(r.step_seconds));
    else
      fmt::print(out,
                 "  (far from ideal: each rank still launches every kernel on 1/N of the rows, "
                 "and the optimizer step is\n   replicated, not divided; a tiny model is "
                 "launch-bound. More work per rank scales better: --batch 128 --dim 128 --seq "
                 "64)\n");
  }
  (void)d;
}

class DdpLesson : public Lesson {
 public:
  std::string name() const override { return "ddp"; }
  std::string summary() const override {
    return "DDP: replicas, rank-sharded data, bucketed all-reduce overlapped with backward";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .steps = 20, .batch = 16}; }
  void add_options(CLI::App& app) override { add_data_parallel_options(app, d_, true, true); }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== ddp: every rank a replica, gradients averaged by all-reduce ==\n");
    int batch = resolve_global_batch(c, d_);
    DataParallelResult r = train_data_parallel(c, d_, out);
    fmt::print(out, "data:   global batch {} = {} per rank x {} ranks x {} accumulation steps\n",
               batch, batch / (c.ranks * d_.accum), c.ranks, d_.accum);
    if (d_.overlap)
      fmt::print(
          out,
          "sync:   {} buckets of at most {} B ({}); each all-reduce starts as soon as "
          "backward has finished its gradients\n"
          "        (PyTorch's 25 MB is 1/16 of a 100M-parameter model's 400 MB of "
          "gradients; auto uses 1/4 so the 2-layer\n        model still shows a few buckets)\n",
          r.buckets, with_commas(r.bucket_bytes),
          d_.bucket_mb == "auto" ? "auto: gradients / 4" : d_.bucket_mb + " MB");
    else
      fmt::print(out,
                 "sync:   --overlap off: one blocking all-reduce per parameter tensor after "
                 "backward\n");
    if (!r.shard_problem.empty()) fmt::print(out, "WARNING: {}\n", r.shard_problem);

    CommonOptions one = c;  // the same global batch on one rank, for the speedup
    one.ranks = 1;
    one.steps = std::min(c.steps, 2);
    one.trace_path.clear();
    DataParallelOptions one_d = d_;
    one_d.batch_per_rank = 0;
    one.batch = batch;
    double one_rank_step = train_data_parallel(one, one_d, out).step_seconds;

    print_ddp_report(out, c, d_, r, one_rank_step);
    r.trace.metadata["predictions"]["speedup"] = one_rank_step / r.step_seconds;
    return finish_run(c, r.trace, name(), out);
  }

 private:
  DataParallelOptions d_;
};

}  // namespace

std::unique_ptr<Lesson> make_ddp_lesson() {
  return std::make_unique<DdpLesson>();
}

}  // namespace mgpu::lessons

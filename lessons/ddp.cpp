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
#include <mutex>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/data/sampler.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/ddp.h"
#include "core/runtime/input_file.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "core/train/single_device.h"
#include "exercises/selection.h"
#include "lessons/host_memory_check.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

// A bucket cap from one byte to 1 TB: outside that (or inf) the bucket plan means nothing.
constexpr double kMinBucketMB = 1e-6, kMaxBucketMB = 1e6;

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
  if (!(mb >= kMinBucketMB && mb <= kMaxBucketMB))  // false for nan and inf too
    throw UsageError(
        fmt::format("--bucket-mb must be 'auto' or from {:g} to {:g} MB, got '{}': try 0.05",
                    kMinBucketMB, kMaxBucketMB, echo_input(d.bucket_mb, 40)));
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(mb * 1e6)));
}

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
    return std::make_unique<parallel::DdpLayout>(
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
        if (auto* ddp = dynamic_cast<parallel::DdpLayout*>(&layout)) {
          if (ctx.rank == 0) result.buckets = static_cast<int>(ddp->ddp().plan().buckets.size());
          last_shards[ctx.rank] = ddp->last_shard();
          if (ctx.rank == 0) result.params = copy_params(ddp->model());
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
      [&](RankContext&) {
        return std::make_unique<train::SingleDeviceLayout>(cfg, optimizer_factory(one));
      },
      {},
      [&](RankContext&, train::Layout& layout) {
        params = copy_params(static_cast<train::SingleDeviceLayout&>(layout).model());
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
        ->check(Switch)  // CLI11 reads on/off (and true/false, 1/0) as a bool, -1 as off
        ->default_str("on");
    app.add_option("--bucket-mb", d.bucket_mb,
                   "gradient bucket cap in MB (1e6 B), or auto = a quarter of the gradients")
        ->check(CLI::Validator(
            [](std::string& s) {
              return s == "auto" ? std::string()
                                 : InRange(kMinBucketMB, kMaxBucketMB, "MB or auto")(s);
            },
            "auto|MB"))
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

void print_ddp_report(std::ostream& out, const CommonOptions& c, const DataParallelResult& r) {
  trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
  const trace::RankSummary& r0 = s.ranks.at(0);
  double n = c.ranks;
  int64_t measured = r0.bytes_sent;  // sum of all-reduce buffer sizes in the step, rank 0
  print_loss_summary(out, c, r.losses, " (mean over the global batch)");
  fmt::print(out, "gradient sync, rank 0, last step:\n");
  const int64_t flag = c.precision == "fp16" ? 4 : 0;  // the loss scaler's found-inf flag
  fmt::print(out, "  all-reduced      {} B per step (gradient bytes 4 x params = {} B{}){}\n",
             with_commas(measured), with_commas(r.gradient_bytes),
             flag ? " + 4 B fp16 found-inf flag" : "",
             measured == r.gradient_bytes + flag ? "" : "  <- differs!");
  // The bytes rank 0 really put on the wire (counted in its sends), beside the formula.
  std::optional<int64_t> sent = r0.wire_bytes;
  fmt::print(
      out, "  ring traffic     2(N-1)/N x {} B = {} B sent per rank (the same for any N > 1){}\n",
      with_commas(r.gradient_bytes),
      with_commas(static_cast<int64_t>(theory::ring_all_reduce_factor(n) * double(measured))),
      sent ? fmt::format("; measured {} B", with_commas(*sent)) : " (formula; not measured yet)");
  fmt::print(out,
             "  comm {},\n  of which hidden behind backward {} ({:.1f}% overlap), exposed {}\n",
             format_comm_split(r0), format_seconds(r0.overlap), 100 * r0.overlap_fraction,
             format_seconds(r0.exposed_comm));
}

// The 1-rank baseline of a data-parallel run: the same global batch on one rank, by gradient
// accumulation over rank-sized micro-batches, so it needs no more memory than one rank of the run.
// Runs on this process alone (threads), so under mpirun the other ranks are not involved.
double one_rank_step_seconds(const CommonOptions& c, const DataParallelOptions& d, int batch,
                             std::ostream& out) {
  CommonOptions one = c;
  one.backend = "local";
  one.ranks = 1;
  one.steps = std::min(c.steps, 2);
  one.trace_path.clear();
  one.checkpoint.clear();
  one.resume.clear();
  one.batch = batch;
  DataParallelOptions one_d = d;
  one_d.log_losses = false;
  one_d.batch_per_rank = 0;
  one_d.accum = d.accum * c.ranks;
  return train_data_parallel(one, one_d, out).step_seconds;
}

// Act 1 of the speedup story: DDP at a GPT-2-small size (12 layers, dim 768, 12 heads, seq 1024,
// 8 sequences per rank) on phantom GPUs, with the same ranks, profile and sync options: the
// modeled clock times it without doing the math, so it takes a fraction of a second.
std::pair<double, double> scaling_at_gpt2_small(const CommonOptions& c,
                                                const DataParallelOptions& d, std::ostream& out) {
  CommonOptions big = c;
  big.backend = "local";
  big.device = "phantom";
  big.clock = "modeled";
  big.layers = 12, big.dim = 768, big.heads = 12, big.seq = 1024;
  big.batch = 8 * c.ranks * d.accum;
  big.steps = 2;
  big.quiet = true;
  big.trace_path.clear();
  big.checkpoint.clear();
  big.resume.clear();
  DataParallelOptions big_d = d;
  big_d.log_losses = false;
  big_d.batch_per_rank = 0;
  double n_ranks = train_data_parallel(big, big_d, out).step_seconds;
  return {n_ranks, one_rank_step_seconds(big, big_d, big.batch, out)};
}

void print_speedup(std::ostream& out, const CommonOptions& c, const DataParallelResult& r,
                   double one_rank_step) {
  trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
  const trace::RankSummary& r0 = s.ranks.at(0);
  const double n = c.ranks;
  const double speedup = one_rank_step / r.step_seconds;
  fmt::print(out, "  step {} on {} ranks vs {} on 1 rank: speedup {:.2f}x (ideal {}x)\n",
             format_seconds(r.step_seconds), c.ranks, format_seconds(one_rank_step), speedup,
             c.ranks);
  if (speedup < 0.7 * n) {
    if (r0.exposed_comm > 0.5 * r.step_seconds)
      fmt::print(out,
                 "  (far from ideal: communication-bound. {} of the {} step waits for the link; "
                 "compute per rank is too\n   small to hide it. Larger batches per rank or "
                 "a faster link help, more ranks do not.)\n",
                 format_seconds(r0.exposed_comm), format_seconds(r.step_seconds));
    else
      fmt::print(out,
                 "  (far from ideal: in a step this short, the exposed all-reduce ({}) and the "
                 "optimizer step, which every\n   rank repeats in full, weigh heavily, and each "
                 "kernel's launch cost does not shrink with 1/N of the rows.\n   More work per "
                 "rank scales better: see act 1, or --batch 128 --dim 128 --seq 64)\n",
                 format_seconds(r0.exposed_comm));
  }
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
    print_checkpoint_lines(out, c,
                           {r.first_step, {}, r.checkpoint_written, {}, 0, r.fresh_optimizer});
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
    if (!root_process()) return 0;  // under mpirun rank 0's process reports

    double one_rank_step = one_rank_step_seconds(c, d_, batch, out);
    print_ddp_report(out, c, r);
    fmt::print(out,
               "\nspeedup 1 -> {} ranks (same profile, same global batch; the 1-rank baseline "
               "accumulates rank-sized micro-batches):\n",
               c.ranks);
    const bool at_scale = one_rank_step / r.step_seconds >= 0.7 * c.ranks;
    if (!at_scale && c.ranks > 1) {
      auto [n_step, one_step] = scaling_at_gpt2_small(c, d_, out);
      fmt::print(out,
                 "act 1, a GPT-2-small-sized model (12 layers, dim 768, seq 1024, 8 sequences "
                 "per rank; phantom GPUs, modeled):\n  step {} on {} ranks vs {} on 1 rank: "
                 "speedup {:.2f}x (ideal {}x)\n",
                 format_seconds(n_step), c.ranks, format_seconds(one_step), one_step / n_step,
                 c.ranks);
      r.trace.metadata["predictions"]["speedup_gpt2_small"] = one_step / n_step;
      fmt::print(out, "act 2, this run's small model:\n");
    }
    print_speedup(out, c, r, one_rank_step);
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

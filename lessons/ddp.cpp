// Lesson 3 — DDP, and the runner the data-parallel lessons share. Every rank holds a replica,
// trains on its own shard of the global batch and averages gradients with all-reduce; with
// buckets, each all-reduce starts while backward is still running on earlier layers, so most of
// the communication hides behind compute. The lesson prints how much (overlap %, exposed comm),
// the bytes each rank all-reduces beside the ring formula 2(N-1)/N x gradient bytes, and the
// speedup over one rank on the same hardware profile.
#include "lessons/ddp.h"

#include <algorithm>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "lessons/training.h"

namespace mgpu::lessons {

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

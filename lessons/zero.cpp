// Lesson 15 — ZeRO and FSDP. DDP keeps a full copy of the model states on every GPU: parameters,
// gradients and optimizer state, 16 B per parameter in fp32 with AdamW. ZeRO shards them over the
// data-parallel ranks: stage 1 the optimizer state, stage 2 the gradients too, stage 3 (FSDP) the
// parameters too. The lesson measures each rank's memory by category from the allocator beside
// the paper's formulas, the bytes each rank puts on the wire beside 2 Psi (stages 0-2) and 3 Psi
// (stage 3), and with --paper reproduces the paper's headline figure on 64 phantom GPUs.
#include "lessons/zero.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/model_states.h"
#include "core/trace/analysis.h"
#include "lessons/training.h"
#include "lessons/validate.h"
#include "lessons/zero_internal.h"

namespace mgpu::lessons {

namespace detail {

theory::StateBytes state_bytes(const CommonOptions& c, int param_bytes) {
  return theory::model_state_bytes(param_bytes, c.optimizer);
}

}  // namespace detail

namespace {

std::string stage_title(int stage) {
  switch (stage) {
    case 0:
      return "stage 0 (DDP): every rank holds all model states";
    case 1:
      return "stage 1: optimizer state sharded";
    case 2:
      return "stage 2: optimizer state and gradients sharded";
    default:
      return "stage 3 (FSDP): optimizer state, gradients and parameters sharded";
  }
}

void print_memory_table(std::ostream& out, const CommonOptions& c, int stage,
                        const ZeroRunResult& r) {
  const theory::StateBytes b = detail::state_bytes(c, r.param_bytes);
  const double psi = static_cast<double>(r.params), n = c.ranks;
  const theory::ZeroStates f = theory::zero_model_states(stage, b, psi, n);
  const int shown = std::min<int>(static_cast<int>(r.peak.size()), 4);
  fmt::print(out,
             "\nmemory per rank: peak bytes by category, measured by the allocator, beside the "
             "ZeRO formula\n(Psi = {} parameters, N = {}, {} B params + {} B gradients + {} B "
             "optimizer state per parameter)\n",
             with_commas(r.params), c.ranks, b.params, b.grads, b.optimizer);
  fmt::print(out, "  {:<18}", "");
  for (int rank = 0; rank < shown; ++rank) fmt::print(out, " {:>11}", fmt::format("rank {}", rank));
  if (shown < static_cast<int>(r.peak.size())) fmt::print(out, " {:>11}", "max of all");
  fmt::print(out, "   formula\n");
  auto row = [&](const std::string& what, auto value, const std::string& formula) {
    fmt::print(out, "  {:<18}", what);
    int64_t most = 0;
    for (size_t rank = 0; rank < r.peak.size(); ++rank) {
      const int64_t v = value(rank);
      most = std::max(most, v);
      if (static_cast<int>(rank) < shown) fmt::print(out, " {:>11}", format_bytes(v));
    }
    if (shown < static_cast<int>(r.peak.size())) fmt::print(out, " {:>11}", format_bytes(most));
    fmt::print(out, "   {}\n", formula);
  };
  auto over = [&](bool sharded) { return sharded ? " / N" : ""; };
  auto formula = [&](int bytes, bool sharded, double value) {
    return fmt::format("{} Psi{} = {}", bytes, over(sharded),
                       format_bytes(static_cast<int64_t>(value)));
  };
  auto peak = [&](MemCategory m) { return [&r, m](size_t rank) { return at(r.peak[rank], m); }; };
  row("parameters", peak(MemCategory::parameters), formula(b.params, stage >= 3, f.params));
  row("gradients", peak(MemCategory::gradients), formula(b.grads, stage >= 2, f.grads));
  row("optimizer_state", peak(MemCategory::optimizer_state),
      formula(b.optimizer, stage >= 1, f.optimizer));
  const std::string paper = stage == 0   ? "({}+{}+{}) Psi"
                            : stage == 1 ? "({}+{}) Psi + {} Psi / N"
                            : stage == 2 ? "{} Psi + ({}+{}) Psi / N"
                                         : "({}+{}+{}) Psi / N";
  row(
      "model states",
      [&](size_t rank) {
        return at(r.peak[rank], MemCategory::parameters) +
               at(r.peak[rank], MemCategory::gradients) +
               at(r.peak[rank], MemCategory::optimizer_state);
      },
      fmt::format(fmt::runtime(paper), b.params, b.grads, b.optimizer) + " = " +
          format_bytes(static_cast<int64_t>(f.total())));
  row("transient", peak(MemCategory::comm_buffers),
      fmt::format("(comm_buffers) gathered units and gradient buckets; largest unit {} params",
                  with_commas(r.largest_unit)));
  row("activations", peak(MemCategory::activations), "(not sharded by ZeRO)");
  fmt::print(out,
             "  (transient: stage 3 holds the unit computing plus the one prefetched, stages 2-3 "
             "the gradient bucket of\n   the unit in backward plus the one still reducing; "
             "stage 1 the chunks it reduce-scatters and all-gathers; stages 1-3\n   also the "
             "reduce-scatter's two spare chunks of 1/N; stage 0's all-reduce works in place and "
             "holds none)\n");
  fmt::print(out,
             "  model states at every stage for this model on {} ranks (formula, computed):\n ",
             c.ranks);
  for (int s = 0; s <= 3; ++s)
    fmt::print(out, "  stage {} {}{}", s,
               format_bytes(static_cast<int64_t>(theory::zero_model_states(s, b, psi, n).total())),
               s < 3 ? "," : "\n");
}

void print_traffic(std::ostream& out, const CommonOptions& c, int stage, const ZeroRunResult& r) {
  auto step = last_step(r.trace);
  if (!step) return;
  const trace::TraceSummary s = trace::analyze(r.trace, step);
  const trace::RankSummary& r0 = s.ranks.at(0);
  const theory::StateBytes b = detail::state_bytes(c, r.param_bytes);
  const double psi = static_cast<double>(r.params), n = c.ranks;
  fmt::print(out, "\ncommunication per step, rank 0 (sent bytes measured from the trace):\n");
  const std::string how =
      stage == 0  ? fmt::format("all-reduce 2(N-1)/N x {} Psi", b.grads)
      : stage < 3 ? fmt::format("reduce-scatter (N-1)/N x {} Psi + all-gather (N-1)/N x {} Psi",
                                b.grads, b.params)
                  : fmt::format("reduce-scatter (N-1)/N x {} Psi + 2 all-gathers (N-1)/N x {} Psi",
                                b.grads, b.params);
  fmt::print(out, "  sent {} (measured)   formula: {} = {}\n", format_bytes(r0.wire_bytes), how,
             format_bytes(static_cast<int64_t>(theory::zero_bytes_sent(stage, b, psi, n))));
  if (b.params == b.grads)
    fmt::print(out, "  in Psi: {:.2f} x {} B x (N-1)/N   (the paper: {} Psi{})\n",
               n > 1 ? double(r0.wire_bytes) / (b.grads * psi * (n - 1) / n) : 0.0, b.grads,
               stage < 3 ? 2 : 3,
               stage < 3 ? ", as DDP" : ": 1.5x DDP, the price of sharding the parameters");
  else if (stage == 0)
    fmt::print(out,
               "  (the paper's 2 Psi counts every transfer at 2 B; here the all-reduce moves "
               "{}-B gradients)\n",
               b.grads);
  else
    fmt::print(out,
               "  (the paper's {} Psi counts every transfer at 2 B; here the all-gathers move {}-B "
               "parameters and the\n   reduce-scatters {}-B gradients)\n",
               stage < 3 ? 2 : 3, b.params, b.grads);
  fmt::print(out, "  comm {},\n  of which hidden behind compute {} ({:.1f}% overlap), exposed {}\n",
             format_comm_split(r0), format_seconds(r0.overlap), 100 * r0.overlap_fraction,
             format_seconds(r0.exposed_comm));
}

class ZeroLesson : public Lesson {
 public:
  std::string name() const override { return "zero"; }
  std::string summary() const override {
    return "ZeRO-1/2/3 and FSDP: optimizer state, gradients, parameters sharded; memory vs the "
           "paper";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .steps = 20, .batch = 16}; }
  void add_options(CLI::App& app) override {
    app.add_option("--stage", options_.stage,
                   "0 (DDP) | 1 optimizer state | 2 + gradients | 3 + parameters "
                   "(FSDP)")
        ->check(InRange(0, 3, "(the ZeRO stage)"))
        ->capture_default_str();
    prefetch_option_ =
        app.add_option("--prefetch", options_.prefetch,
                       "stage 3: all-gather the next unit while this one computes (on|off)")
            ->check(Switch)
            ->default_str("on");
    app.add_flag("--paper", paper_,
                 "the paper's headline figure: 7.5B parameters on 64 phantom GPUs, every stage");
    app_ = &app;
  }

  int run(const CommonOptions& c, std::ostream& out) override {
    if (paper_) {
      // The figure fixes the model, precision, optimizer and device; only --ranks may change.
      for (const char* typed :
           {"--stage",         "--prefetch",  "--checkpoint", "--resume",   "--trace",
            "--device",        "--clock",     "--model",      "--layers",   "--dim",
            "--heads",         "--seq",       "--vocab",      "--batch",    "--steps",
            "--precision",     "--optimizer", "--recompute",  "--capacity", "--profile",
            "--tie-embeddings"})
        if (app_->count(typed) > 0)
          throw UsageError(fmt::format(
              "--paper compares every stage of a fixed 7.5B model (bf16, AdamW) on phantom GPUs: "
              "drop {} (only --ranks applies)",
              typed));
      CommonOptions p = c;
      if (app_->count("--ranks") == 0) p.ranks = 64;
      return print_zero_paper_figure(p, out);
    }
    if (prefetch_option_->count() > 0 && options_.stage != 3)
      throw UsageError(fmt::format(
          "--prefetch applies to stage 3, whose parameters are gathered per unit: add --stage 3 "
          "or drop --prefetch (stage {} has no gathers to prefetch)",
          options_.stage));
    fmt::print(out, "== zero: {} ==\n", stage_title(options_.stage));
    ZeroRunResult r = train_zero(c, options_, out);
    if (r.first_step > 0 || r.checkpoint_written) fmt::print(out, "\n");
    print_checkpoint_lines(
        out, c,
        {r.first_step, {}, r.checkpoint_written, r.skipped_steps, r.loss_scale, r.fresh_optimizer});
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    print_loss_summary(out, c, r.losses, " (mean over the global batch)");
    if (options_.stage == 3)
      fmt::print(out, "prefetch: {}\n",
                 options_.prefetch ? "on (the next unit's all-gather is issued before this unit "
                                     "computes)"
                                   : "off (each all-gather waits until its unit is needed)");
    print_memory_table(out, c, options_.stage, r);
    print_traffic(out, c, options_.stage, r);
    fmt::print(out, "\n");
    return finish_run(c, r.trace, name(), out);
  }

 private:
  parallel::ZeroOptions options_{.stage = 3, .prefetch = true};
  bool paper_ = false;
  CLI::Option* prefetch_option_ = nullptr;
  CLI::App* app_ = nullptr;
};

}  // namespace

std::unique_ptr<Lesson> make_zero_lesson() {
  return std::make_unique<ZeroLesson>();
}

}  // namespace mgpu::lessons

// Lesson 15 — ZeRO and FSDP. DDP keeps a full copy of the model states on every GPU: parameters,
// gradients and optimizer state, 16 B per parameter in fp32 with AdamW. ZeRO shards them over the
// data-parallel ranks: stage 1 the optimizer state, stage 2 the gradients too, stage 3 (FSDP) the
// parameters too. The lesson measures each rank's memory by category from the allocator beside
// the paper's formulas, the bytes each rank puts on the wire beside 2 Psi (stages 0-2) and 3 Psi
// (stage 3), and with --paper reproduces the paper's headline figure on 64 phantom GPUs.
#include "lessons/zero.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/trace/analysis.h"
#include "lessons/ddp.h"
#include "lessons/impl.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

constexpr int kCategories = kNumMemCategories;

int64_t at(const CategoryBytes& b, MemCategory c) {
  return b[static_cast<int>(c)];
}

StateBytes state_bytes(const CommonOptions& c, int param_bytes) {
  const int moments = c.optimizer == "sgd" ? 4 : 8;
  return {param_bytes, 4, moments + (param_bytes < 4 ? 4 : 0)};
}

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

// Bytes one rank sends per step with ring collectives: all-reduce 2(N-1)/N x G; reduce-scatter
// and all-gather (N-1)/N x their size each.
double wire_formula(int stage, const StateBytes& b, double psi, double n) {
  const double f = (n - 1) / n, grads = b.grads * psi, params = b.params * psi;
  if (stage == 0) return 2 * f * grads;
  if (stage < 3) return f * grads + f * params;
  return f * grads + 2 * f * params;
}

std::string stage_name(int stage) {
  return stage == 0 ? "baseline" : fmt::format("stage {}", stage);
}

std::string gb(double bytes) {
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

}  // namespace

// ---- the run -------------------------------------------------------------------------------

ZeroRunResult train_zero(const CommonOptions& c, const parallel::ZeroOptions& options,
                         std::ostream& out) {
  WorldOptions wopt = c.world_options();
  const int global_batch = resolve_global_batch(c, DataParallelOptions{});
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  ZeroRunResult result;
  result.params = count_params(cfg);
  result.param_bytes = static_cast<int>(dtype_size(cfg.dtype));
  World world(wopt);
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, result.params));
    fmt::print(out,
               "shards: every layer (the embedding, each block, the head) is one flat unit, cut "
               "into {} consecutive chunks\n        (the first n % {} ranks one element more); "
               "rank r updates only its chunk\n",
               c.ranks, c.ranks);
    fmt::print(out, "data:   global batch {} = {} per rank x {} ranks\n", global_batch,
               global_batch / c.ranks, c.ranks);
    fmt::print(out, "device: {}\n\n", describe_world(wopt));
  }
  LossLog log(c, out);
  std::mutex mutex;
  train::TrainResult trained = train::train(
      world, *task, train_options(c, global_batch, cfg),
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        auto layout = std::make_unique<parallel::ZeroLayout>(
            cfg, *ctx.comm, options, optimizer_factory(c), selected_seams().zero);
        return layout;
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout& layout) {
        const auto& zero = static_cast<parallel::ZeroLayout&>(layout);
        const MemoryStats stats = ctx.allocator.stats();
        std::vector<int64_t> mine(stats.peak.begin(), stats.peak.end());
        mine.insert(mine.end(), stats.current.begin(), stats.current.end());
        int64_t largest = 0;
        for (const parallel::ZeroUnit& u : zero.units()) largest = std::max(largest, u.numel);
        mine.insert(mine.end(), {zero.owned_elements(), largest});
        auto all = train::gather_to_root(ctx, mine);
        if (ctx.rank != 0) return;
        std::lock_guard lock(mutex);
        for (const auto& v : all) {
          CategoryBytes peak{}, settled{};
          std::copy_n(v.begin(), kCategories, peak.begin());
          std::copy_n(v.begin() + kCategories, kCategories, settled.begin());
          result.peak.push_back(peak);
          result.settled.push_back(settled);
          result.owned.push_back(v[2 * kCategories]);
          result.largest_unit = v[2 * kCategories + 1];
        }
      });
  result.losses = trained.losses;
  result.first_step = trained.first_step;
  result.checkpoint_written = trained.checkpoint_written;
  result.fresh_optimizer = trained.fresh_optimizer;
  result.skipped_steps = trained.skipped_steps;
  result.loss_scale = trained.loss_scale;
  const StateBytes b = state_bytes(c, result.param_bytes);
  const double psi = static_cast<double>(result.params), n = c.ranks;
  nlohmann::json meta = {
      {"lesson", "zero"},
      {"config", c.to_json()},
      {"zero", {{"stage", options.stage}, {"prefetch", options.prefetch}}},
      {"predictions",
       {{"model_state_bytes_per_rank", stage_formula(options.stage, b, psi, n).total()},
        {"bytes_sent_per_rank", wire_formula(options.stage, b, psi, n)}}}};
  result.trace = world.collect_trace(meta);
  return result;
}

// ---- the report ----------------------------------------------------------------------------

namespace {

void print_memory_table(std::ostream& out, const CommonOptions& c, int stage,
                        const ZeroRunResult& r) {
  const StateBytes b = state_bytes(c, r.param_bytes);
  const double psi = static_cast<double>(r.params), n = c.ranks;
  const StageFormula f = stage_formula(stage, b, psi, n);
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
               format_bytes(static_cast<int64_t>(stage_formula(s, b, psi, n).total())),
               s < 3 ? "," : "\n");
}

void print_traffic(std::ostream& out, const CommonOptions& c, int stage, const ZeroRunResult& r) {
  auto step = last_step(r.trace);
  if (!step) return;
  const trace::TraceSummary s = trace::analyze(r.trace, step);
  const trace::RankSummary& r0 = s.ranks.at(0);
  const StateBytes b = state_bytes(c, r.param_bytes);
  const double psi = static_cast<double>(r.params), n = c.ranks;
  fmt::print(out, "\ncommunication per step, rank 0 (sent bytes measured from the trace):\n");
  const std::string how =
      stage == 0  ? fmt::format("all-reduce 2(N-1)/N x {} Psi", b.grads)
      : stage < 3 ? fmt::format("reduce-scatter (N-1)/N x {} Psi + all-gather (N-1)/N x {} Psi",
                                b.grads, b.params)
                  : fmt::format("reduce-scatter (N-1)/N x {} Psi + 2 all-gathers (N-1)/N x {} Psi",
                                b.grads, b.params);
  fmt::print(out, "  sent {} (measured)   formula: {} = {}\n", format_bytes(r0.wire_bytes), how,
             format_bytes(static_cast<int64_t>(wire_formula(stage, b, psi, n))));
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
  fmt::print(out, "  comm {} of which hidden behind compute {} ({:.1f}% overlap), exposed {}\n",
             format_seconds(r0.comm), format_seconds(r0.overlap), 100 * r0.overlap_fraction,
             format_seconds(r0.exposed_comm));
}

// The paper's Figure 1: a 7.5B-parameter model on 64 GPUs with mixed precision and Adam (K = 12).
// Each stage runs one step on phantom GPUs (shapes and bytes, no math), and the allocator says what
// every rank holds.
int print_paper_figure(const CommonOptions& c, std::ostream& out) {
  CommonOptions p = c;
  p.device = "phantom";
  p.clock = "modeled";
  p.layers = 35, p.dim = 4096, p.heads = 32, p.seq = 1024, p.vocab = 50257;
  p.batch = p.ranks;
  p.steps = 1;
  p.capacity = "4TiB";  // the baseline does not fit 80 GB: that is the point of the figure
  p.precision = "bf16";
  p.optimizer = "adamw";
  p.quiet = true;
  p.trace_path.clear();
  p.checkpoint.clear();
  p.resume.clear();
  auto task = make_task(p);
  const int64_t psi = count_params(model_config(p, *task));
  fmt::print(out,
             "== the ZeRO paper's headline: Psi = {:.2f}B parameters on N = {} GPUs, mixed "
             "precision with Adam (K = 12) ==\n",
             psi / 1e9, p.ranks);
  fmt::print(out, "model:  {} (phantom GPUs: shapes and bytes, no math; one step per stage)\n\n",
             describe_model(model_config(p, *task), psi));
  fmt::print(out, "  {:<10} {:>22} {:>24} {:>20} {:>22}\n", "", "model states per GPU",
             "paper: (2+2+K) formula", "transient + activ.", "largest model in 80 GB");
  fmt::print(out, "  {:<10} {:>22} {:>24} {:>20} {:>22}\n", "", "(measured)", "", "(measured)",
             "(from the measured B/param)");
  const double n = p.ranks;
  std::vector<CategoryBytes> measured;
  for (int stage = 0; stage <= 3; ++stage) {
    std::ostringstream quiet;
    ZeroRunResult r = train_zero(p, {.stage = stage, .prefetch = true}, quiet);
    const CategoryBytes& m = r.peak.at(0);
    measured.push_back(m);
    const double states = at(m, MemCategory::parameters) + at(m, MemCategory::gradients) +
                          at(m, MemCategory::optimizer_state);
    const double other = at(m, MemCategory::comm_buffers) + at(m, MemCategory::activations);
    const StageFormula paper = stage_formula(stage, {2, 2, 12}, static_cast<double>(psi), n);
    const double bytes_per_param = states / static_cast<double>(psi);
    fmt::print(out, "  {:<10} {:>22} {:>24} {:>20} {:>22}\n", stage_name(stage), gb(states),
               gb(paper.total()), gb(other),
               fmt::format("{:.1f}B params", 80e9 / bytes_per_param / 1e9));
  }
  // The same measurements as bars: one character per 2.5 GB of rank 0's model states.
  fmt::print(out,
             "\n  model states of rank 0, measured (P parameters, G gradients, O optimizer "
             "state; one character = 2.5 GB, | = 80 GB):\n");
  for (int stage = 0; stage <= 3; ++stage) {
    const CategoryBytes& m = measured[static_cast<size_t>(stage)];
    std::string bar;
    double upto = 0;  // rounded at the category ends, so the whole bar is the rounded total
    for (auto [category, letter] :
         {std::pair{MemCategory::parameters, 'P'}, std::pair{MemCategory::gradients, 'G'},
          std::pair{MemCategory::optimizer_state, 'O'}}) {
      upto += static_cast<double>(at(m, category));
      bar.resize(static_cast<size_t>(std::lround(upto / 2.5e9)), letter);
    }
    if (bar.size() > 32) bar.insert(32, "|");  // 32 characters = 80 GB
    bar += fmt::format(" {}", gb(upto));
    fmt::print(out, "  {:<10} {}\n", stage_name(stage), bar);
  }
  fmt::print(out,
             "\n  (ours differ from the paper's 2+2+K in the gradients: they stay fp32 here (4 B), "
             "so the baseline is\n   2+4+12 = 18 B/param; the largest model counts model states "
             "only, as the paper's figure does)\n");
  return 0;
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
        ->check(CLI::Range(0, 3))
        ->capture_default_str();
    prefetch_option_ =
        app.add_option("--prefetch", options_.prefetch,
                       "stage 3: all-gather the next unit while this one computes (on|off)")
            ->default_str("on");
    app.add_flag("--paper", paper_,
                 "the paper's headline figure: 7.5B parameters on 64 phantom GPUs, every stage");
    app_ = &app;
  }

  int run(const CommonOptions& c, std::ostream& out) override {
    if (paper_) {
      // The figure fixes the model, precision, optimizer and device; only --ranks may change.
      for (const char* typed :
           {"--stage",     "--prefetch",  "--checkpoint", "--resume",   "--trace",
            "--device",    "--clock",     "--model",      "--layers",   "--dim",
            "--heads",     "--seq",       "--vocab",      "--batch",    "--steps",
            "--precision", "--optimizer", "--recompute",  "--capacity", "--profile"})
        if (app_->count(typed) > 0)
          throw UsageError(fmt::format(
              "--paper compares every stage of a fixed 7.5B model (bf16, AdamW) on phantom GPUs: "
              "drop {} (only --ranks applies)",
              typed));
      CommonOptions p = c;
      if (app_->count("--ranks") == 0) p.ranks = 64;
      return print_paper_figure(p, out);
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

StageFormula stage_formula(int stage, const StateBytes& b, double psi, double n) {
  return {b.params * psi / (stage >= 3 ? n : 1.0), b.grads * psi / (stage >= 2 ? n : 1.0),
          b.optimizer * psi / (stage >= 1 ? n : 1.0)};
}

}  // namespace mgpu::lessons

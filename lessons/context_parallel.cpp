// Lesson 9 — context parallelism. Long sequences are where attention's memory grows with T^2:
// split every sequence over cp GPUs and each holds T/cp of its tokens through the whole model.
// Ring attention passes the K/V blocks round the ring (cp-1 hops, hidden behind the attention on
// the block in hand), merging partial results with the online-softmax rule; zigzag balances the
// causal work that contiguous chunks leave on the last rank; Ulysses swaps sequence for heads with
// two all-to-alls; chunked attends only within each rank's chunk and learns a worse model. The
// lesson measures each from the trace (busy/idle, wire bytes) and the allocator (activations).
#include "lessons/context_parallel.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <CLI/CLI.hpp>

#include "core/parallel/context_parallel.h"
#include "exercises/selection.h"
#include "lessons/context_parallel_internal.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

parallel::CpLayout layout_of(const std::string& name) {
  try {
    return parallel::parse_cp_layout(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

// ---- the run -------------------------------------------------------------------------------

ContextParallelResult train_context_parallel(const CommonOptions& c, const std::string& layout_name,
                                             std::ostream& out) {
  const parallel::CpLayout layout = layout_of(layout_name);
  std::shared_ptr<const data::Task> task = make_task(c);
  const GPTConfig cfg = model_config(c, *task);
  run::RunSpec spec = run_spec(c, task, cfg, c.batch);
  spec.parallelism = run::ContextParallel{.layout = layout, .seams = ex::selected_seams().cp};
  try {
    run::validate(spec);  // what this run can do, before any rank starts (one line, exit 2)
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  spec.train.report_ranks = true;
  spec.trace_meta = {
      {"lesson", "context_parallel"}, {"cp_layout", layout_name}, {"config", c.to_json()}};
  (*spec.trace_meta)["config"]["cp"] = c.ranks;  // the mesh axis: rows "GPU 1  cp1"
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
    const std::vector<int32_t> r0 = parallel::cp_positions(c.seq, c.ranks, 0, layout);
    fmt::print(out, "split:  cp={} {}: each GPU holds {} of the {} tokens of every sequence{}\n",
               c.ranks, layout_name, r0.size(), c.seq,
               layout == parallel::CpLayout::zigzag
                   ? fmt::format(" (rank 0: positions {}..{} and {}..{})", r0.front(),
                                 r0[r0.size() / 2 - 1], r0[r0.size() / 2], r0.back())
                   : "");
    fmt::print(out, "data:   {} task, {} sequences x {} tokens per step\n", task->name(), c.batch,
               c.seq);
    fmt::print(out, "device: {}\n", describe_world(spec.world));
    fmt::print(out, "optim:  {} lr {}\n\n", c.optimizer, c.lr);
  }
  ContextParallelResult result;
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  for (const train::RankReport& rank : ran.trained.ranks)
    result.peak_activations.push_back(rank.memory.peak[static_cast<int>(MemCategory::activations)]);
  result.losses = ran.trained.losses;
  if (ran.trained.first_step > 0 || ran.trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, ran.trained);
  result.trace = std::move(ran.trace);
  result.under_mpi = ran.mpi;
  return result;
}

namespace {

class ContextParallelLesson : public Lesson {
 public:
  std::string name() const override { return "context_parallel"; }
  std::string summary() const override {
    return "ring attention (contiguous/zigzag), Ulysses all-to-all, naive chunks: T/cp tokens per "
           "GPU";
  }
  LessonDefaults defaults() const override { return {.ranks = 2, .steps = 40, .batch = 8}; }

  void add_options(CLI::App& app) override {
    ranks_option_ = app.get_option_no_throw("--ranks");
    app.add_option("--cp", cp_, "context-parallel ranks (default: --ranks)")
        ->check(AtLeastOne("rank"));
    app.add_option("--cp-layout", layout_, "contiguous, zigzag, ulysses or chunked")
        ->capture_default_str();
    app.add_option("--compare", compare_,
                   "on: also measure activation memory for cp = 1, 2, 4 and train the "
                   "exact/naive counterpart")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
  }

  int run(const CommonOptions& given, std::ostream& out) override {
    CommonOptions c = given;
    if (cp_ > 0) {
      const bool ranks_typed = ranks_option_ && ranks_option_->count() > 0;
      if ((ranks_typed || launched_by_mpi()) && c.ranks != cp_)
        throw UsageError(fmt::format(
            "--cp {} but the run has {} ranks (all of them form the cp group): drop --ranks or "
            "make it {}{}",
            cp_, c.ranks, cp_, launched_by_mpi() ? fmt::format(" (mpirun -n {})", cp_) : ""));
      c.ranks = cp_;
    }
    const parallel::CpLayout layout = layout_of(layout_);
    fmt::print(out, "== context_parallel: every sequence split over {} GPUs ({}) ==\n", c.ranks,
               layout_);
    ContextParallelResult r = train_context_parallel(c, layout_, out);
    print_loss_summary(out, c, r.losses,
                       " (the mean over all B*T tokens: each GPU's share averaged)");
    auto task = make_task(c);
    const GPTConfig cfg = model_config(c, *task);
    detail::print_balance(out, r.trace);
    detail::print_wire(out, c, cfg, layout, r.trace);
    if (!r.peak_activations.empty())
      fmt::print(
          out, "\npeak activations per GPU (allocator): {}   {}\n",
          format_bytes(*std::max_element(r.peak_activations.begin(), r.peak_activations.end())),
          cfg.style.is_gpt2()  // the formula counts GPT-2's block (layernorm, GELU, 4C MLP)
              ? "formula " +
                    format_bytes(detail::activation_formula(cfg, c.batch, c.seq, c.ranks, layout))
              : std::string("(the formula counts GPT-2's block only)"));
    if (compare_ == "on" && r.under_mpi) {
      fmt::print(out,
                 "\n(under mpirun the world size is fixed: run without mpirun for the cp = 1, 2, 4 "
                 "memory table and the exact-vs-chunked comparison)\n");
    } else if (compare_ == "on") {
      detail::print_memory_vs_seq(out, c, layout, layout_);
      detail::print_exactness(out, c, layout, r.losses);
    }
    return finish_run(c, r.trace, name(), out);
  }

 private:
  CLI::Option* ranks_option_ = nullptr;
  int cp_ = 0;
  std::string layout_ = "zigzag";
  std::string compare_ = "on";
};

}  // namespace

std::unique_ptr<Lesson> make_context_parallel_lesson() {
  return std::make_unique<ContextParallelLesson>();
}

}  // namespace mgpu::lessons

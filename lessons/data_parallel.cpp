// Lesson 2 — naive data parallelism (PyTorch's nn.DataParallel), the contrast to DDP. Rank 0
// drives: it scatters the batch, broadcasts every parameter to the replicas, collects and sums
// their gradients, and alone runs the optimizer. The timeline shows the cost: rank 0 is busy
// (sending, summing, updating) while the replicas idle, and the whole model crosses the links
// every step before any compute can start.
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "lessons/ddp.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

class DataParallelLesson : public Lesson {
 public:
  std::string name() const override { return "data_parallel"; }
  std::string summary() const override {
    return "naive DataParallel: rank 0 scatters, broadcasts weights, gathers gradients, updates";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .steps = 20, .batch = 16}; }
  void add_options(CLI::App& app) override { add_data_parallel_options(app, d_, false, false); }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== data_parallel: one driver (rank 0), {} replicas ==\n", c.ranks);
    DataParallelOptions naive = d_;
    naive.naive = true;
    int batch = resolve_global_batch(c, naive);
    // Before the losses, as the other lessons do: what each step feeds the replicas.
    if (root_process())
      fmt::print(out, "data:   global batch {} scattered by rank 0: {} sequences per rank\n", batch,
                 batch / c.ranks);
    DataParallelResult r = train_data_parallel(c, naive, out);
    print_checkpoint_lines(out, c,
                           {r.first_step, {}, r.checkpoint_written, {}, 0, r.fresh_optimizer});
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    print_loss_summary(out, c, r.losses);

    trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
    // What crosses the links per step, by construction of the scheme (P = model bytes).
    double n = c.ranks, model_bytes = double(r.gradient_bytes);
    fmt::print(out,
               "per step: rank 0 broadcasts the model (P = {} B) and receives {} gradients "
               "({} B) that it sums alone\n",
               with_commas(r.gradient_bytes), c.ranks - 1,
               with_commas(static_cast<int64_t>((n - 1) * model_bytes)));
    fmt::print(out,
               "DDP instead: no broadcast, and every rank sends 2(N-1)/N x P = {} B, "
               "whatever N is\n",
               with_commas(static_cast<int64_t>(theory::ring_all_reduce_factor(n) * model_bytes)));
    if (s.ranks.size() > 1)
      fmt::print(out, "rank 0 busy {} vs replica busy {}: the replicas wait for the driver\n",
                 format_seconds(s.ranks[0].busy), format_seconds(s.ranks[1].busy));

    DataParallelOptions ddp = d_;  // the same run as DDP, for the contrast
    ddp.log_losses = false;
    CommonOptions quiet = c;
    quiet.checkpoint.clear();
    quiet.backend = "local";  // threads on this process: mpirun's other ranks are done
    quiet.resume.clear();
    quiet.steps = std::min(c.steps, 2);
    quiet.trace_path.clear();
    double ddp_step = train_data_parallel(quiet, ddp, out).step_seconds;
    fmt::print(out, "step: {} here vs {} with DDP on the same {} ranks ({:.2f}x slower)\n",
               format_seconds(r.step_seconds), format_seconds(ddp_step), c.ranks,
               r.step_seconds / ddp_step);
    r.trace.metadata["predictions"]["ddp_step_seconds"] = ddp_step;

    return finish_run(c, r.trace, name(), out);
  }

 private:
  DataParallelOptions d_;
};

}  // namespace

std::unique_ptr<Lesson> make_data_parallel_lesson() {
  return std::make_unique<DataParallelLesson>();
}

}  // namespace mgpu::lessons

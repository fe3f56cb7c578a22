// Lesson 4 — gradient accumulation and the global batch. Each rank splits its shard into k
// micro-batches and runs forward/backward on each, ACCUMULATING gradients (each loss scaled by
// 1/k); only the last micro-step all-reduces (DDP's no_sync for the others), so communication per
// optimizer step stays one gradient's worth however large k is. The global batch is
// per-rank micro-batch x ranks x k, and the result equals one big batch on one device.
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/trace/analysis.h"
#include "lessons/ddp.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

class GradAccumLesson : public Lesson {
 public:
  GradAccumLesson() { d_.accum = 4; }
  std::string name() const override { return "grad_accum"; }
  std::string summary() const override {
    return "gradient accumulation: k micro-steps, one all-reduce, same result as one big batch";
  }
  LessonDefaults defaults() const override { return {.ranks = 2, .steps = 10, .batch = 16}; }
  void add_options(CLI::App& app) override { add_data_parallel_options(app, d_, true, true); }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== grad_accum: {} micro-steps per optimizer step on {} ranks ==\n", d_.accum,
               c.ranks);
    int batch = resolve_global_batch(c, d_);
    int micro = batch / (c.ranks * d_.accum);
    fmt::print(out, "global batch {} = {} per micro-batch x {} ranks x {} accumulation steps\n",
               batch, micro, c.ranks, d_.accum);
    DataParallelResult r = train_data_parallel(c, d_, out);
    print_checkpoint_lines(out, c,
                           {r.first_step, {}, r.checkpoint_written, {}, 0, r.fresh_optimizer});
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    print_loss_summary(out, c, r.losses);

    trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
    fmt::print(
        out,
        "all-reduced per optimizer step on rank 0: {} B = one gradient ({} B), not {} of them\n",
        with_commas(s.ranks[0].bytes_sent), with_commas(r.gradient_bytes), d_.accum);

    // The claim of the lesson, checked: one device, one batch of the same global size.
    if (r.params.empty()) {
      fmt::print(out, "(phantom device: no parameter values to compare with one big batch)\n");
    } else {
      float diff = max_param_difference(r.params, train_single_device_params(c, batch));
      fmt::print(out,
                 "max |param - single-device param| after {} steps with batch {}: {:.3g} "
                 "(float rounding: the sums run in a different order)\n",
                 c.steps, batch, diff);
      r.trace.metadata["predictions"]["max_param_difference"] = diff;
    }

    return finish_run(c, r.trace, name(), out);
  }

 private:
  DataParallelOptions d_;
};

}  // namespace

std::unique_ptr<Lesson> make_grad_accum_lesson() {
  return std::make_unique<GradAccumLesson>();
}

}  // namespace mgpu::lessons

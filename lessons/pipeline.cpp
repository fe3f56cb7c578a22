// Lesson 6 — pipeline parallelism. Each rank is one stage: a contiguous slice of the model's
// blocks. The batch is cut into M micro-batches that flow down the stages (activations, sent
// point-to-point) and back up (gradients). A schedule says in which order each stage runs its
// forwards and backwards; the idle gaps it leaves are the "bubbles" this lesson measures against
// the formulas: (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(VM+P-1) interleaved.
#include "lessons/pipeline.h"

#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/pipeline/simulate.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"
#include "lessons/exercise_views.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

// Tied embeddings: the embedding group's all-reduce of the last step (each member's last), as
// the trace has it, beside its bytes by the formula.
void print_embedding_group(std::ostream& out, const CommonOptions& c, const PipelineResult& r) {
  if (r.embedding_group_bytes == 0) return;
  std::map<int, const trace::Event*> last;  // rank -> its last all-reduce in the group
  for (const trace::Event& e : r.trace.events)
    if (e.group == "embedding" && e.op == "all_reduce" &&
        (!last.count(e.rank) || last[e.rank]->start < e.start))
      last[e.rank] = &e;
  fmt::print(out, "\nembedding group (tied wte: the first and the last stage), step {}:\n",
             c.steps);
  for (const auto& [rank, e] : last)
    fmt::print(
        out, "  rank {}  all_reduce of the wte gradient: {:>10}  (vocab {} x dim {} x 4 B = {})\n",
        rank, format_bytes(e->bytes), r.vocab, r.dim, format_bytes(r.embedding_group_bytes));
}

// The end-of-run report: bubble and memory, measured beside the theory, then the pictures.
void report(std::ostream& out, const CommonOptions& c, const PipelineOptions& p,
            const PipelineResult& r) {
  const int P = static_cast<int>(r.last_step.size());
  fmt::print(out, "\nbubble per rank, step {} (idle / step time), measured vs theory {}:\n",
             c.steps, pipeline::bubble_formula(p.schedule, P, p.microbatches, p.virtual_stages));
  fmt::print(out, "  (measured by {})\n", bubble_accounting_credit());
  for (int s = 0; s < P; ++s)
    fmt::print(out, "  rank {}  bubble measured {:>6}  theory {:>6}\n", s,
               percent(r.measured_bubble[s]), percent(r.theory_bubble));
  if (!p.theory)
    fmt::print(out,
               "  (the formula assumes equal stages; here stage 0 also embeds and stage {} "
               "computes the loss, and messages take time: add --theory for equal stages)\n",
               P - 1);
  fmt::print(out,
             "\npeak activations per rank: (micro-batch, chunk) sets held at once x the "
             "largest set:\n");
  for (int s = 0; s < P; ++s) {
    const auto& st = r.last_step[s];
    fmt::print(
        out, "  rank {}  held {:>2} (expected {:>2})  x {:>10} = {:>10}  (allocator peak {})\n", s,
        st.peak_stashed, r.expected_peak[s], format_bytes(st.stash_bytes),
        format_bytes(st.peak_stashed * st.stash_bytes), format_bytes(st.peak_activation_bytes));
  }
  if (theory::schedule_kind(p.schedule) == theory::ScheduleKind::zb_h1)
    fmt::print(out,
               "  (the allocator holds more: W still needs the Linear inputs and the gradients "
               "B kept, until W runs, s micro-batches after B on stage s)\n");
  print_embedding_group(out, c, r);
}

class PipelineLesson : public Lesson {
 public:
  explicit PipelineLesson(bool naive) : naive_(naive) {
    if (naive_) {
      options_.schedule = theory::schedule_name(theory::ScheduleKind::naive);
      options_.microbatches = 1;
    }
  }
  std::string name() const override { return naive_ ? "model_parallel" : "pipeline"; }
  std::string summary() const override {
    return naive_ ? "split the layers over GPUs: it fits, but only one GPU works at a time"
                  : "micro-batches fill the pipeline: GPipe, 1F1B, interleaved, ZB-H1, ZB-V, "
                    "DualPipe(V); bubbles vs theory";
  }
  LessonDefaults defaults() const override {
    return {.ranks = 4, .steps = 20, .batch = 16, .layers = 8};
  }
  void add_options(CLI::App& app) override {
    if (!naive_) {
      app.add_option("--schedule", options_.schedule,
                     "gpipe | 1f1b | interleaved | zb-h1 | zbv | dualpipev | dualpipe")
          ->capture_default_str();
      app.add_option("--microbatches", options_.microbatches, "micro-batches per batch (M)")
          ->capture_default_str();
      app.add_option("--virtual-stages", options_.virtual_stages,
                     "model chunks per stage (V, interleaved only)")
          ->capture_default_str();
    }
    app.add_option("--stages", options_.stages, "pipeline stages P (default: --ranks)")
        ->check(AtLeastOne("stage"));
    ranks_option_ = app.get_option("--ranks");
    app.add_flag("--theory", options_.theory,
                 "theory mode: fixed 1 ms per F and 2 ms per B, equal stages, exact formulas");
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    const int P = options_.stages > 0 ? options_.stages : c.ranks;
    if (options_.stages > 0 && ranks_option_ && ranks_option_->count() > 0 && c.ranks != P)
      throw UsageError(
          fmt::format("the pipeline runs one rank per stage: --stages {} needs --ranks {} (or "
                      "leave --ranks out)",
                      P, P));
    fmt::print(out, "== {}: {} over {} stages, {} micro-batch(es) ==\n", name(), options_.schedule,
               P, options_.microbatches);
    PipelineResult r = train_pipeline(c, options_, out);
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    report(out, c, options_, r);
    const theory::ScheduleTraits& s = theory::traits(theory::schedule_kind(options_.schedule));
    // The V schedules and DualPipe are where its table is news; 1F1B and ZB-H1 have rows in it.
    if (options_.theory && !r.params.empty() && (s.v_shape || s.bidirectional))
      print_dualpipe_table(out, options_.schedule, r);
    return finish_run(c, r.trace, name(), out);
  }

 private:
  bool naive_;
  PipelineOptions options_;
  const CLI::Option* ranks_option_ = nullptr;  // to tell "--ranks 4" from the default 4
};

}  // namespace

std::unique_ptr<Lesson> make_model_parallel_lesson() {
  return std::make_unique<PipelineLesson>(true);
}
std::unique_ptr<Lesson> make_pipeline_lesson() {
  return std::make_unique<PipelineLesson>(false);
}

}  // namespace mgpu::lessons

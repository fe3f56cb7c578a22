// Lesson: expert parallelism. A mixture-of-experts model's experts are split over the GPUs of an
// ep group while the batch is split over all of them; every MoE layer sends each token's row to
// the GPU of its expert and back (dispatch and combine, two all-to-alls whose sizes the router
// decides). The lesson measures, beside the formulas: the tokens each expert got (the router's
// imbalance), the tokens dropped at the capacity factor, the all-to-all bytes per layer, the
// memory per GPU (experts at 1/ep), and, in a second act, what a skewed router does to the
// all-to-all and to the slowest GPU.
#include "lessons/expert_parallel.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/expert_parallel.h"
#include "exercises/selection.h"
#include "lessons/expert_parallel_report.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

// The second act's router: the selected routing, on probabilities with expert 0's multiplied by
// the tilt and each row renormalised (a router that has collapsed towards one expert). RouteFn is
// the seam's plain function pointer, so the tilt and the routing it wraps are set once before a
// run and only read during it.
struct Tilt {
  double factor = 1.0;
  RouteFn route = nullptr;
};
Tilt& tilt() {
  static Tilt t;
  return t;
}

Routing tilted_route(const RouteQuery& query) {
  std::vector<float> probs(query.probs.begin(), query.probs.end());
  for (int64_t t = 0; t < query.tokens; ++t) {
    float* row = probs.data() + t * query.experts;
    row[0] = static_cast<float>(row[0] * tilt().factor);
    float sum = 0;
    for (int e = 0; e < query.experts; ++e) sum += row[e];
    for (int e = 0; e < query.experts; ++e) row[e] /= sum;
  }
  RouteQuery tilted = query;
  tilted.probs = probs;
  return tilt().route(tilted);
}

int resolve_ep(const CommonOptions& c, const ExpertParallelOptions& o) {
  const int ep = o.ep == 0 ? c.ranks : o.ep;
  if (ep < 1 || c.ranks % ep != 0)
    throw UsageError(
        fmt::format("--ep {} must divide --ranks {}: try --ep {}", ep, c.ranks, c.ranks));
  return ep;
}

}  // namespace

ExpertParallelResult train_expert_parallel(const CommonOptions& c, const ExpertParallelOptions& o,
                                           double skew, std::ostream& out) {
  std::shared_ptr<const data::Task> task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  cfg.validate();  // top-k > E and the like: one line before any rank starts
  ExpertParallelResult result;
  result.ep = resolve_ep(c, o);
  result.dp = c.ranks;
  run::RunSpec spec = run_spec(c, task, cfg, c.batch);
  spec.parallelism = run::ExpertParallel{.ep = result.ep};
  run::validate(spec);  // experts, ep dividing them and the ranks, the batch over dp
  result.config = cfg;
  if (!spec.model.route) spec.model.route = ex::selected_seams().moe.route;
  if (skew != 1.0) {
    tilt() = {.factor = skew, .route = spec.model.route};
    spec.model.route = &tilted_route;
  }
  spec.trace_meta = {{"lesson", "expert_parallel"}, {"config", c.to_json()}};
  (*spec.trace_meta)["config"]["ep"] = result.ep;
  (*spec.trace_meta)["config"]["skew"] = skew;
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  result.losses = ran.trained.losses;
  if (ran.trained.first_step > 0 || ran.trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, ran.trained);
  result.trace = std::move(ran.trace);
  return result;
}

namespace {

class ExpertParallelLesson : public Lesson {
 public:
  std::string name() const override { return "expert_parallel"; }
  std::string summary() const override {
    return "MoE experts split over GPUs: dispatch/combine all-to-alls, router imbalance, 1/ep "
           "expert memory";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .steps = 20, .batch = 8}; }
  void add_options(CLI::App& app) override {
    app.add_option("--ep", options_.ep,
                   "GPUs per expert-parallel group (divides --ranks and --experts); default: all")
        ->check(AtLeastOne("rank"));
    app.add_option("--skew", options_.skew,
                   "second act: expert 0's routing probability x this (renormalised); 1 = skip it")
        ->check(InRange(1.0, 1e6, "(x expert 0's probability)"))
        ->capture_default_str();
  }

  int run(const CommonOptions& c, std::ostream& out) override {
    if (!c.quiet)
      fmt::print(out, "== expert_parallel: experts split over GPUs, tokens sent to them ==\n");
    const ExpertParallelResult r = train_expert_parallel(c, options_, 1.0, out);
    std::optional<ExpertParallelResult> plain, skewed;
    // A phantom device has no values to route on (every expert gets the same load): no act 2.
    const bool phantom = c.device == "phantom";
    if (options_.skew != 1.0 && !phantom) {  // every process runs it: under mpirun a world too
      CommonOptions act2 = c;  // two short dropless runs: routed as trained, then skewed
      act2.steps = std::min(c.steps, 2);
      act2.quiet = true;
      act2.capacity_factor = "dropless";  // the hot expert keeps every token sent to it
      act2.checkpoint.clear();
      act2.resume.clear();
      act2.trace_path.clear();
      act2.viz = false;
      std::ostringstream ignored;
      plain = train_expert_parallel(act2, options_, 1.0, ignored);
      skewed = train_expert_parallel(act2, options_, options_.skew, ignored);
    }
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    print_loss_summary(out, c, r.losses, " (the same global batch as one GPU)");
    print_expert_report(out, c, r);
    print_timeline(out, r.trace, last_step(r.trace));
    print_rank_table(out, r.trace, last_step(r.trace));
    if (skewed) print_skew_act(out, c, options_.skew, *plain, *skewed);
    if (phantom && options_.skew != 1.0)
      fmt::print(out,
                 "\nact 2 (--skew {:g}) not run: the phantom device has no probabilities to skew "
                 "(it routes every token round-robin); run it on cpu or cuda\n",
                 options_.skew);
    return finish_trace(c, r.trace, name(), out);
  }

 private:
  ExpertParallelOptions options_;
};

}  // namespace

std::unique_ptr<Lesson> make_expert_parallel_lesson() {
  return std::make_unique<ExpertParallelLesson>();
}

}  // namespace mgpu::lessons

// Lesson 17 — recommendations: "which layout should I use?", answered by the planner instead of
// by rules of thumb. Four questions, each a `mgpu plan` search (every layout's figures from the
// modeled clock, core/plan/search.h); the lesson reads the rule off what the search printed:
//   a model that fits one GPU        -> data parallel (no per-layer communication at all);
//   a model that does not fit         -> tensor parallel inside a node (NVLink), pipeline across;
//   long sequences                    -> context parallel;
//   optimizer state over the capacity -> ZeRO.
// Where the engine cannot run an option yet, the lesson says so instead of inventing a number.
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "exercises/selection.h"
#include "lessons/lesson.h"
#include "lessons/plan.h"
#include "lessons/recommendations_internal.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace detail {

std::string RecommendationsLesson::name() const {
  return "recommendations";
}

std::string RecommendationsLesson::summary() const {
  return "which layout? the planner on four cases: data parallel, TP in a node + PP across, "
         "context parallel, ZeRO";
}

LessonDefaults RecommendationsLesson::defaults() const {
  return {.model_options = false};
}

void RecommendationsLesson::add_options(CLI::App& app) {
  app.add_option("--max-simulated", max_simulated_, "layouts simulated per case")
      ->capture_default_str()
      ->check(InRange(1, 1000, "layouts"));
  // This lesson runs the planner, not a training world: the world's options do not apply, so
  // they are not offered (typing one is an error naming it, not a silently ignored option).
  for (const char* name : {"--ranks", "--device", "--clock", "--capacity", "--trace", "--viz",
                           "--impl", "--comm-timeout"})
    app.remove_option(app.get_option(name));
  profile_option_ = app.get_option("--profile");
  profile_option_->default_str("DGX-H100");
}

int RecommendationsLesson::run(const CommonOptions& c, std::ostream& out) {
  quiet_ = c.quiet;
  const HardwareProfile profile =
      HardwareProfile::load(profile_option_->count() > 0 ? c.profile : "DGX-H100");
  ex::select_impl("reference", out);
  fmt::print(out,
             "Which layout should I use? Four questions to the planner (`mgpu plan`) on {} "
             "({} GPUs per node, {} per GPU; {} inside a node, {} between).\n"
             "Each prints its best layouts (figures from the modeled clock); the rule is read "
             "off those numbers.\n",
             profile.name, profile.ranks_per_node, gib(profile.memory_capacity),
             profile.intra_node.name, profile.inter_node.name);
  small_model(profile, out);
  large_model(profile, out);
  long_sequences(profile, out);
  optimizer_memory(profile, out);
  return 0;
}

plan::SearchResult RecommendationsLesson::search(const Case& k, const HardwareProfile& profile,
                                                 std::ostream& out, plan::SearchRequest& request) {
  const PlanModel model = plan_model(k.model);
  request.workload.model = model.config;
  request.workload.seams = ex::selected_seams().hybrid();
  request.gpus = k.gpus;
  request.global_batch = model.default_global_batch;
  request.profile = profile;
  request.top = 3;
  request.max_simulated = max_simulated_;
  k.adjust(request);
  fmt::print(out, "\n== {} ==\n`mgpu plan --model {} --gpus {} --profile {}{}`\n", k.title, k.model,
             k.gpus, profile.name, extra_flags_);
  std::ostringstream progress;  // the lesson shows the result, not the progress lines
  plan::SearchResult result = run_search(request, progress);
  std::ostringstream discarded;
  print_plan(quiet_ ? discarded : out, request, result, k.model, PlanDetail::brief);
  return result;
}

}  // namespace detail

std::unique_ptr<Lesson> make_recommendations_lesson() {
  return std::make_unique<detail::RecommendationsLesson>();
}

}  // namespace mgpu::lessons

#include "lessons/exercise_views.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/training.h"

namespace mgpu::lessons {

std::vector<double> measured_bubble_fractions(const trace::Trace& trace, int step) {
  const trace::Interval window = trace::analysis_window(trace, step);
  std::vector<double> fractions;
  for (const trace::RankIdle& r :
       ex::selected_seams().bubble.bubble_accounting(trace, window.begin, window.end))
    fractions.push_back(r.bubble_fraction);
  return fractions;
}

namespace {

std::string seam_credit(const std::string& exercise, const std::string& impl_name) {
  return fmt::format("{} ({})", exercise, impl_name == "mine" ? "yours" : impl_name);
}

// The per-rank element count a category holds, written as the formula the estimate follows.
std::string elements_formula(int64_t params, int dp, bool sharded) {
  if (!sharded || dp == 1) return with_commas(params);
  return fmt::format("ceil({} / {})", with_commas(params), dp);
}

}  // namespace

std::string bubble_accounting_credit() {
  return seam_credit("exercise 04's bubble accounting", ex::selected_seams().bubble.impl_name);
}

void print_memory_prediction(std::ostream& out, const MemoryRun& run, const MemoryStats& measured) {
  const memory::MemorySeams& seams = ex::selected_seams().memory;
  const int64_t params = seams.gpt_param_count(run.model);
  const memory::MemoryEstimate predicted =
      seams.estimate_memory({params, run.precision, run.dp, run.zero_stage});
  const bool bf16 = run.precision == memory::Precision::mixed_bf16;
  const int z = run.zero_stage;
  auto measured_peak = [&](MemCategory c) { return measured.peak[static_cast<int>(c)]; };

  fmt::print(out, "\npredicted by {}, {} parameters, {}{}:\n",
             seam_credit("exercise 05's memory estimator", seams.impl_name), with_commas(params),
             bf16 ? "mixed bf16" : "fp32",
             run.dp > 1 ? fmt::format(", dp {} with ZeRO-{}", run.dp, z) : "");
  auto row = [&](const char* name, int64_t bytes, const std::string& formula, MemCategory cat) {
    fmt::print(out, "  {:<16} {:>10} = {:<28} measured peak {:>10}\n", name, format_bytes(bytes),
               formula, format_bytes(measured_peak(cat)));
  };
  row("parameters", predicted.parameters,
      fmt::format("{} x {} B", elements_formula(params, run.dp, z >= 3), bf16 ? 2 : 4),
      MemCategory::parameters);
  row("gradients", predicted.gradients,
      fmt::format("{} x {} B", elements_formula(params, run.dp, z >= 2), 4),
      MemCategory::gradients);
  if (run.optimizer == "adamw") {
    row("optimizer state", predicted.optimizer_state,
        fmt::format("{} x {} B", elements_formula(params, run.dp, z >= 1), bf16 ? 12 : 8),
        MemCategory::optimizer_state);
  } else {
    fmt::print(out, "  {:<16} {:>10}   (the estimator models AdamW; this run uses {})\n",
               "optimizer state", "-", run.optimizer);
  }
}

}  // namespace mgpu::lessons

// Lesson 15's --paper: the ZeRO paper's headline figure (Rajbhandari et al. 2020, Figure 1)
// measured on phantom GPUs beside the paper's formula (core/theory/model_states.h).
#include <cmath>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/model_states.h"
#include "lessons/training.h"
#include "lessons/zero.h"

namespace mgpu::lessons {

namespace {

std::string stage_name(int stage) {
  return stage == 0 ? "baseline" : fmt::format("stage {}", stage);
}

std::string gb(double bytes) {
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

}  // namespace

// The paper's Figure 1: a 7.5B-parameter model on 64 GPUs with mixed precision and Adam (K = 12).
// Each stage runs one step on phantom GPUs (shapes and bytes, no math), and the allocator says what
// every rank holds.
int print_zero_paper_figure(const CommonOptions& c, std::ostream& out) {
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
    const theory::ZeroStates paper =
        theory::zero_model_states(stage, {2, 2, 12}, static_cast<double>(psi), n);
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

}  // namespace mgpu::lessons

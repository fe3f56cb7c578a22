// The expert-parallel lesson's report (expert_parallel_report.h). Every figure is read from the
// trace (the "dispatch counts" events carry each rank's kept slots per expert; the all_to_all_v
// events the bytes each exchange put on the wire; the memory samples the parameter bytes) and
// printed beside its closed form in core/theory/expert_parallel.h.
#include "lessons/expert_parallel_report.h"

#include <algorithm>
#include <numeric>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/model/moe.h"
#include "core/runtime/dtype.h"
#include "core/theory/collectives.h"
#include "core/theory/expert_parallel.h"
#include "core/theory/model_states.h"
#include "core/trace/analysis.h"
#include "core/trace/expert_load.h"
#include "lessons/training.h"

namespace mgpu::lessons {

using trace::exchange_sent_bytes;
using trace::expert_loads;
using trace::ExpertLoad;

// ---- the report ----

namespace {

// The ep group of world rank r holds ranks [r / ep * ep, ...): its members' counts.
std::vector<std::vector<int64_t>> group_counts(const ExpertLoad& load, int ep, int rank) {
  const int first = rank / ep * ep;
  return {load.per_rank.begin() + first, load.per_rank.begin() + first + ep};
}

void print_load_table(std::ostream& out, const CommonOptions& c, const ExpertParallelResult& r,
                      const ExpertLoad& load, int64_t slots_per_rank) {
  const size_t experts = load.total().size();
  std::string header = fmt::format("  block {:<3}", load.layer);
  for (size_t e = 0; e < experts; ++e) header += fmt::format(" {:>5}", fmt::format("e{}", e));
  fmt::print(out, "{}  dropped\n", header);
  for (size_t r = 0; r < load.per_rank.size(); ++r) {
    const auto& counts = load.per_rank[r];
    std::string row = fmt::format("    GPU {:<3}", r);
    for (int64_t n : counts) row += fmt::format(" {:>5}", n);
    const int64_t kept = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    fmt::print(out, "{}  {:>7}\n", row, slots_per_rank - kept);
  }
  const std::vector<int64_t> total = load.total();
  std::string row = "    all    ";
  for (int64_t n : total) row += fmt::format(" {:>5}", n);
  const int64_t tokens = int64_t{c.batch} * c.seq;
  fmt::print(out, "{}  max/mean {:.2f} (balanced: {} tokens x top-{} / {} experts = {:g} each)\n",
             row, theory::load_imbalance(total), tokens, r.config.top_k, experts,
             theory::balanced_expert_load(tokens, r.config.top_k, static_cast<int>(experts)));
}

void print_capacity(std::ostream& out, const CommonOptions& c, const ExpertParallelResult& r,
                    const std::vector<ExpertLoad>& loads, int64_t slots_per_rank) {
  const int64_t capacity =
      expert_capacity(r.config.capacity_factor, c.seq, r.config.top_k, r.config.experts);
  const int64_t groups = c.batch / r.dp;  // sequences per rank: capacity is per sequence
  int64_t most = 0, dropped = 0;
  for (const ExpertLoad& l : loads)
    for (const auto& counts : l.per_rank) {
      most = std::max(most, *std::max_element(counts.begin(), counts.end()));
      dropped += slots_per_rank - std::accumulate(counts.begin(), counts.end(), int64_t{0});
    }
  const int64_t slots = slots_per_rank * r.dp * static_cast<int64_t>(loads.size());
  if (capacity == 0) {
    fmt::print(out, "  dropless (no --capacity-factor): every slot kept, dropped {} of {}\n",
               dropped, slots);
    return;
  }
  fmt::print(out,
             "  capacity: ceil({:g} x {} tokens x top-{} / {} experts) = {} per expert per "
             "sequence, so at most {} per expert on a GPU ({} sequence{}); most kept: {}\n",
             r.config.capacity_factor, c.seq, r.config.top_k, r.config.experts, capacity,
             theory::max_kept_per_expert(capacity, groups), groups, groups == 1 ? "" : "s", most);
  fmt::print(out, "  dropped {} of {} (token, choice) slots ({:.1f}%): the slots over capacity\n",
             dropped, slots, slots ? 100.0 * dropped / slots : 0.0);
}

void print_exchange(std::ostream& out, const CommonOptions& c, const ExpertParallelResult& r,
                    const std::vector<ExpertLoad>& loads, int step, int element_bytes) {
  fmt::print(
      out, "\nall-to-all per MoE layer, GPU 0, last step (bytes it sent, from the trace), ep={}:\n",
      r.ep);
  const int64_t c_dim = r.config.dim;
  for (const ExpertLoad& l : loads) {
    const auto group = group_counts(l, r.ep, 0);
    const std::vector<int64_t> send_rows = theory::rows_per_rank(group[0], r.ep);
    const int64_t combine_rows = theory::combine_rows_sent(group, 0);
    const int64_t dispatch = theory::moe_dispatch_sent_bytes(send_rows, 0, c_dim, element_bytes);
    const int64_t combine = combine_rows * c_dim * element_bytes;
    auto sent = [&](const char* name) {
      return with_commas(exchange_sent_bytes(r.trace, step, 0, name, l.layer));
    };
    const int64_t measured = exchange_sent_bytes(r.trace, step, 0, "", l.layer);
    const int passes = r.config.recompute == Recompute::full ? 2 : 1;
    const int64_t formula = theory::exchange_bytes_per_layer(dispatch, combine, passes);
    fmt::print(out, "  block {}: dispatch {} + combine {} forward, {} + {} backward = {} B\n",
               l.layer, sent("dispatch"), sent("combine"), sent("combine bwd"),
               sent("dispatch bwd"), with_commas(measured));
    fmt::print(out,
               "    formula {} x (dispatch {} rows + combine {} rows) x C {} x {} B = {} B{}{}\n",
               passes + 1, dispatch / (c_dim * element_bytes), combine_rows, c_dim, element_bytes,
               with_commas(formula),
               passes > 1 ? " (full recompute: the forward's exchanges run twice)" : "",
               measured == formula ? "" : "  <- differs!");
  }
  const int64_t tokens = int64_t{c.batch} / r.dp * c.seq;
  fmt::print(out,
             "  a balanced router: each way {} tokens x top-{} x (ep-1)/ep x C x {} B = {} B\n",
             tokens, r.config.top_k, element_bytes,
             with_commas(theory::moe_dispatch_sent_bytes_balanced(tokens, r.config.top_k, c_dim,
                                                                  element_bytes, r.ep)));
}

void print_parameter_split(std::ostream& out, const ExpertParallelResult& r, int element_bytes) {
  const GPTConfig& cfg = r.config;
  const int64_t per_block =
      theory::moe_mlp_parameters(cfg, cfg.experts) - theory::moe_mlp_parameters(cfg, 0);
  const int64_t experts = theory::moe_blocks(cfg) * per_block;
  const int64_t dense = theory::gpt_parameters(cfg) - experts;
  const int64_t measured = trace::memory_timeline(r.trace, 0)
                               .peak.by_category[static_cast<int>(MemCategory::parameters)];
  const int64_t formula = theory::params_per_rank(dense, experts, r.ep) * element_bytes;
  fmt::print(out,
             "\nparameters per GPU (GPU 0, allocator): {}   formula: (dense {} + experts {} / "
             "ep {}) x {} B = {}{}\n",
             format_bytes(measured), with_commas(dense), with_commas(experts), r.ep, element_bytes,
             format_bytes(formula), measured == formula ? "" : "  <- differs!");
  fmt::print(out, "  (every expert on every GPU, as plain data parallelism keeps them: {})\n",
             format_bytes((dense + experts) * element_bytes));
}

}  // namespace

void print_expert_report(std::ostream& out, const CommonOptions& c, const ExpertParallelResult& r) {
  const std::optional<int> step = last_step(r.trace);
  if (!step) return;
  const std::vector<ExpertLoad> loads = expert_loads(r.trace, *step);
  const int element_bytes = static_cast<int>(dtype_size(parse_precision(c.precision)));
  const int64_t slots_per_rank = int64_t{c.batch} / r.dp * c.seq * r.config.top_k;
  fmt::print(out,
             "\ntokens per expert, last step: each GPU's kept (token, choice) slots, from the "
             "trace:\n");
  for (const ExpertLoad& l : loads) print_load_table(out, c, r, l, slots_per_rank);
  print_capacity(out, c, r, loads, slots_per_rank);
  print_exchange(out, c, r, loads, *step, element_bytes);
  print_parameter_split(out, r, element_bytes);
}

namespace {

// One GPU's share of a run's last step: expert rows it computed, bytes its all-to-alls sent, its
// compute lane's busy time and its comm lane's waiting for partners.
struct GpuStep {
  int64_t rows = 0, sent = 0;
  double busy = 0, wait = 0;
};

std::vector<GpuStep> gpu_steps(const ExpertParallelResult& r, double* step_seconds) {
  const int step = *last_step(r.trace);
  const std::vector<ExpertLoad> loads = expert_loads(r.trace, step);
  const trace::TraceSummary s = trace::analyze(r.trace, step);
  *step_seconds = s.window.length();
  std::vector<GpuStep> gpus(static_cast<size_t>(r.trace.num_ranks));
  for (int rank = 0; rank < r.trace.num_ranks; ++rank) {
    GpuStep& g = gpus[static_cast<size_t>(rank)];
    for (const ExpertLoad& l : loads)
      g.rows += theory::expert_rows_computed(group_counts(l, r.ep, rank), rank % r.ep);
    g.sent = exchange_sent_bytes(r.trace, step, rank, "");
    g.busy = s.ranks[static_cast<size_t>(rank)].busy;
    g.wait = s.ranks[static_cast<size_t>(rank)].comm_wait;
  }
  return gpus;
}

}  // namespace

void print_skew_act(std::ostream& out, const CommonOptions& c, double skew,
                    const ExpertParallelResult& plain, const ExpertParallelResult& skewed) {
  fmt::print(out,
             "\nact 2: a skewed router: expert 0's probability x {:g} (renormalised), dropless, "
             "step {} of a fresh run, beside the same step routed as trained:\n",
             skew, std::min(c.steps, 2));
  double plain_step = 0, skewed_step = 0;
  const std::vector<GpuStep> before = gpu_steps(plain, &plain_step);
  const std::vector<GpuStep> after = gpu_steps(skewed, &skewed_step);
  fmt::print(out,
             "  GPU   expert rows     all-to-all sent (B)     busy                     "
             "waiting for partners\n");
  for (size_t g = 0; g < after.size(); ++g)
    fmt::print(out, "  {:<4}  {:>4} -> {:<6}  {:>9} -> {:<10}  {:>10} -> {:<11}  {} -> {}\n", g,
               before[g].rows, after[g].rows, with_commas(before[g].sent),
               with_commas(after[g].sent), format_seconds(before[g].busy),
               format_seconds(after[g].busy), format_seconds(before[g].wait),
               format_seconds(after[g].wait));
  const auto busiest = std::max_element(after.begin(), after.end(),
                                        [](auto& a, auto& b) { return a.rows < b.rows; });
  double mean = 0;
  for (const GpuStep& g : after) mean += static_cast<double>(g.rows) / after.size();
  const int64_t gpu = busiest - after.begin();
  double waited_before = 0, waited_after = 0;
  for (size_t g = 0; g < after.size(); ++g)
    if (static_cast<int64_t>(g) != gpu)
      waited_before += before[g].wait, waited_after += after[g].wait;
  fmt::print(out,
             "  the busiest, GPU {}{}: {} rows, {:.2f}x the mean; the step takes {} instead of {} "
             "(modeled); the other GPUs wait {} for partners in all (was {})\n",
             gpu, gpu % skewed.ep == 0 ? " (it holds expert 0)" : "", busiest->rows,
             mean > 0 ? busiest->rows / mean : 0.0, format_seconds(skewed_step),
             format_seconds(plain_step), format_seconds(waited_after),
             format_seconds(waited_before));
}

}  // namespace mgpu::lessons

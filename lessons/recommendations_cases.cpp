// The recommendations lesson's four questions: a model that fits one GPU, one that does not, long
// sequences, optimizer state over the capacity; each a planner search and the rule it shows.
#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/runtime/allocator.h"
#include "exercises/selection.h"
#include "lessons/plan.h"
#include "lessons/recommendations_internal.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

using plan::Simulated;

// The first ranked layout `pick` accepts, if any was simulated.
const Simulated* best_where(const plan::SearchResult& r,
                            const std::function<bool(const plan::Layout&)>& pick) {
  for (const Simulated& s : r.ranked)
    if (pick(s.layout)) return &s;
  return nullptr;
}

// The engine's reason for refusing layouts `pick` accepts (empty when it refused none of them).
std::string refusal_for(const plan::SearchResult& r,
                        const std::function<bool(const plan::Layout&)>& pick) {
  for (const auto& [reason, layout] : r.refused_example)
    if (pick(layout)) return reason;
  return "";
}

int refused_count(const plan::SearchResult& r,
                  const std::function<bool(const plan::Layout&)>& pick) {
  int n = 0;
  for (const auto& [reason, layout] : r.refused_example)
    if (pick(layout)) n += r.refused.at(reason);
  return n;
}

}  // namespace

namespace detail {

void RecommendationsLesson::small_model(const HardwareProfile& profile, std::ostream& out) {
  plan::SearchRequest request;
  extra_flags_ = "";
  const auto r = search({"1. a model that fits one GPU", "gpt2-small", 8}, profile, out, request);
  if (r.ranked.empty()) return;
  const Simulated& best = r.ranked[0];
  const Simulated* split = best_where(r, [](const plan::Layout& l) { return l.tp * l.pp > 1; });
  fmt::print(out, "rule: the model fits one GPU, so ");
  if (best.layout.dp == request.gpus)
    fmt::print(out, "data parallelism wins: #1 is dp {} at {:.2f} M tokens/s, {} per GPU",
               best.layout.dp, best.prediction.tokens_per_s / 1e6,
               gib(best.prediction.memory_peak_total));
  else
    fmt::print(out, "one would expect pure data parallelism, but #1 here is {}",
               plan::describe(best.layout));
  if (split)
    fmt::print(out, "; the best layout that splits the model ({}) is {}.\n",
               plan::describe(split->layout), split->why);
  else
    fmt::print(out, " (no layout with tp or pp > 1 was among the {} simulated).\n", r.simulated);
}

void RecommendationsLesson::large_model(const HardwareProfile& profile, std::ostream& out) {
  plan::SearchRequest request;
  extra_flags_ = "";
  const auto r =
      search({"2. a model that does not fit one GPU", "gpt3-175b", 1024}, profile, out, request);
  if (r.ranked.empty()) return;
  const Simulated& best = r.ranked[0];
  const plan::Layout& l = best.layout;
  const int pp_stride = l.tp * l.cp * l.dp;  // mesh order tp, cp, dp, pp: stage neighbours
  // Model states of one unsharded replica, from the memory estimator the lessons use.
  const int64_t params = count_params(request.workload.model);
  const bool fp32 = l.precision == "fp32";
  const memory::MemoryEstimate replica = ex::selected_seams().memory.estimate_memory(
      {.params = params,
       .precision = fp32 ? memory::Precision::fp32 : memory::Precision::mixed_bf16});
  const double states = static_cast<double>(replica.total());
  const bool tp_crosses = best.prediction.tp_crosses_nodes;
  const std::string tp_group =
      l.tp == 1 ? std::string(
                      "It needs no tensor-parallel group (tp 1: no all-reduces inside a "
                      "layer); ")
                : fmt::format(
                      "Its tensor-parallel group {} a node (4 all-reduces of a "
                      "micro-batch's activations per layer ride {} at {:.0f} GB/s); ",
                      tp_crosses ? "CROSSES" : "stays inside",
                      tp_crosses ? profile.inter_node.name : profile.intra_node.name,
                      (tp_crosses ? profile.inter_node : profile.intra_node).bandwidth / 1e9);
  fmt::print(out,
             "rule: it cannot be replicated (AdamW with {} weights holds {:.0f} B per "
             "parameter: {:.2f} TB of model states, computed, {:.0f}x one GPU), so #1 cuts it "
             "{} ways: tp {} x pp {}{}. {}",
             fp32 ? "fp32" : "bf16", states / static_cast<double>(params), states / 1e12,
             std::ceil(states / static_cast<double>(profile.memory_capacity)), l.tp * l.pp * l.cp,
             l.tp, l.pp,
             l.cp > 1 ? fmt::format(" x cp {} (each GPU keeps 1/{} of every sequence's tokens)",
                                    l.cp, l.cp)
                      : "",
             tp_group);
  fmt::print(out,
             "its pipeline stages are {} GPUs apart, so {} (one activation per micro-batch "
             "crosses, {:.0f} GB/s is enough); {} per GPU of {}.\n",
             pp_stride,
             pp_stride >= profile.ranks_per_node ? "consecutive stages sit on different nodes"
                                                 : "some stages share a node",
             profile.inter_node.bandwidth / 1e9, gib(best.prediction.memory_peak_total),
             gib(profile.memory_capacity));
  if (const Simulated* wide = best_where(r, [&](const plan::Layout& x) { return x.tp > l.tp; }))
    fmt::print(out, "      a wider tp ({}) is {}.\n", plan::describe(wide->layout), wide->why);
  for (const Simulated& s : r.rejected)
    if (s.layout.tp * s.layout.pp * s.layout.cp < l.tp * l.pp * l.cp) {
      fmt::print(out, "      cutting it fewer ways ({}) does not fit: {}.\n",
                 plan::describe(s.layout), s.why);
      break;
    }
}

void RecommendationsLesson::long_sequences(const HardwareProfile& profile, std::ostream& out) {
  plan::SearchRequest request;
  extra_flags_ = " --seq 16384";
  const auto r = search({"3. long sequences", "gpt2-medium", 16,
                         [](plan::SearchRequest& q) {
                           q.workload.model.seq_len = 16384;
                           q.global_batch = 64;
                         }},
                        profile, out, request);
  auto with_cp = [](const plan::Layout& l) { return l.cp > 1; };
  const Simulated* cp = best_where(r, with_cp);
  const Simulated* best = r.ranked.empty() ? nullptr : &r.ranked[0];
  const int activations = static_cast<int>(MemCategory::activations);
  if (cp && best) {
    fmt::print(out,
               "rule: with {} tokens per sequence, the best context-parallel layout ({}) keeps "
               "T/cp = {} tokens per GPU: {:.2f} M tokens/s with {} of activations per GPU",
               request.workload.model.seq_len, plan::describe(cp->layout),
               request.workload.model.seq_len / cp->layout.cp, cp->prediction.tokens_per_s / 1e6,
               gib(cp->prediction.memory_peak[activations]));
    if (cp != best) fmt::print(out, " (#1, {}, is faster still)", plan::describe(best->layout));
    auto no_cp = [](const plan::Layout& l) { return l.cp == 1; };
    if (const Simulated* flat = best_where(r, no_cp))
      fmt::print(out, "; the best layout without it ({}) is {}.\n", plan::describe(flat->layout),
                 flat->why.empty() ? "#1" : flat->why);
    else if (auto it = std::find_if(r.rejected.begin(), r.rejected.end(),
                                    [&](const Simulated& s) { return no_cp(s.layout); });
             it != r.rejected.end())
      fmt::print(out, "; without it ({}) the activations do not fit: {}.\n",
                 plan::describe(it->layout), it->why);
    else
      fmt::print(out, "; no layout without cp was among the {} simulated.\n", r.simulated);
    return;
  }
  const std::string refused = refusal_for(r, with_cp);
  fmt::print(out,
             "rule: context parallelism (each GPU keeps 1/cp of the tokens, K/V passed around a "
             "ring) is what long sequences call for, but this engine {}: the search met {} "
             "layouts with cp > 1 and simulated none, so there is no number for it here.",
             refused.empty() ? "simulated none of them" : "refuses it today (" + refused + ")",
             refused_count(r, with_cp));
  if (best)
    fmt::print(
        out, " Without it, #1 holds {} of activations per GPU out of {} in all (simulated).\n",
        gib(best->prediction.memory_peak[activations]), gib(best->prediction.memory_peak_total));
  else
    fmt::print(out, "\n");
}

void RecommendationsLesson::optimizer_memory(const HardwareProfile& profile, std::ostream& out) {
  plan::SearchRequest request;
  // Pure data parallelism with the least activation memory there is (one sequence per
  // micro-batch, full recompute): what is left over the capacity is the model states.
  extra_flags_ = " --tp 1 --pp 1 --cp 1 --microbatch-size 1 --recompute full";
  const auto r = search({"4. optimizer state over the capacity", "gpt3-6.7b", 16,
                         [](plan::SearchRequest& q) {
                           q.pins.tp = 1;
                           q.pins.pp = 1;
                           q.pins.cp = 1;
                           q.pins.microbatch_size = 1;
                           q.pins.recompute = "full";
                         }},
                        profile, out, request);
  auto with_zero = [](const plan::Layout& l) { return l.zero > 0; };
  const int optimizer = static_cast<int>(MemCategory::optimizer_state);
  if (const Simulated* zero = best_where(r, with_zero)) {
    fmt::print(out,
               "rule: pure data parallelism replicates AdamW's state; ZeRO-1 shards it over dp: "
               "{} holds {} of optimizer state per GPU, {} in all, and fits",
               plan::describe(zero->layout), gib(zero->prediction.memory_peak[optimizer]),
               gib(zero->prediction.memory_peak_total));
    auto it = std::find_if(r.rejected.begin(), r.rejected.end(),
                           [](const Simulated& s) { return s.layout.zero == 0; });
    if (it != r.rejected.end())
      fmt::print(out, "; without ZeRO ({}) the optimizer state is {} per GPU and it is {}.\n",
                 plan::describe(it->layout), gib(it->prediction.memory_peak[optimizer]), it->why);
    else
      fmt::print(out, ".\n");
    return;
  }
  const std::string refused = refusal_for(r, with_zero);
  fmt::print(out,
             "rule: ZeRO-1 divides the optimizer state by dp, but this engine {}: the search "
             "met {} layouts with ZeRO and simulated none, so there is no number for it here.",
             refused.empty() ? "simulated none of them" : "refuses it today (" + refused + ")",
             refused_count(r, with_zero));
  if (!r.rejected.empty()) {
    const Simulated& s = r.rejected[0];
    fmt::print(out,
               " What the simulation shows without it: {} needs {} per GPU, {} of it "
               "optimizer state (fp32 master + m + v), which ZeRO-1 would cut to 1/{}.\n",
               plan::describe(s.layout), gib(s.prediction.memory_peak_total),
               gib(s.prediction.memory_peak[optimizer]), s.layout.dp);
  } else {
    fmt::print(out, "\n");
  }
}

}  // namespace detail

}  // namespace mgpu::lessons

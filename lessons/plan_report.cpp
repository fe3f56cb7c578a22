// The planner's report: the table of the best layouts with what its figures mean, the slower and
// rejected ones with why, what the engine refused, and the same as JSON.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/runtime/allocator.h"
#include "lessons/plan.h"

namespace mgpu::lessons {

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

namespace {

std::string tokens_rate(double tokens_per_s) {
  return tokens_per_s >= 1e6 ? fmt::format("{:.2f} M", tokens_per_s / 1e6)
                             : fmt::format("{:.1f} k", tokens_per_s / 1e3);
}

// The ep column, shown only for a model with experts (a dense model's table is unchanged).
std::string ep_column(bool moe, const std::string& value) {
  return moe ? fmt::format(" {:>3}", value) : "";
}

void print_row(std::ostream& out, const std::string& rank, const plan::Simulated& s, bool moe) {
  const plan::Layout& l = s.layout;
  const plan::Prediction& p = s.prediction;
  fmt::print(
      out,
      "  {:>3} {:>4} {:>3} {:>3} {:>3}{} {:>4} {:>5} {:>14} {:>4} {:>4} {:>9} | {:>9} {:>8.1f} "
      "{:>5.1f}% {:>9} {:>6.1f}% {:>9.3f} s\n",
      rank, l.dp, l.tp, l.pp, l.cp, ep_column(moe, std::to_string(l.ep)), l.microbatch_size,
      l.microbatches,
      l.virtual_stages > 1 ? fmt::format("{} V{}", l.schedule, l.virtual_stages) : l.schedule,
      l.zero, l.precision, l.recompute, tokens_rate(p.tokens_per_s), p.tflops_per_gpu, 100 * p.mfu,
      gib(p.memory_peak_total), 100 * p.bubble_fraction, p.exposed_comm_seconds);
}

void print_header(std::ostream& out, bool moe) {
  fmt::print(out,
             "  {:>3} {:>4} {:>3} {:>3} {:>3}{} {:>4} {:>5} {:>14} {:>4} {:>4} {:>9} | {:>9} {:>8} "
             "{:>6} {:>9} {:>7} {:>11}\n",
             "#", "dp", "tp", "pp", "cp", ep_column(moe, "ep"), "mbs", "M", "schedule", "zero",
             "prec", "recompute", "tokens/s", "TFLOP/s", "MFU", "mem/GPU", "idle", "exposed comm");
}

nlohmann::json layout_json(const plan::Simulated& s, bool moe) {
  const plan::Layout& l = s.layout;
  const plan::Prediction& p = s.prediction;
  nlohmann::json memory;
  for (int c = 0; c < kNumMemCategories; ++c)
    memory[category_name(static_cast<MemCategory>(c))] = p.memory_peak[c];
  memory["total"] = p.memory_peak_total;
  nlohmann::json j = {{"dp", l.dp},
                      {"tp", l.tp},
                      {"pp", l.pp},
                      {"cp", l.cp},
                      {"microbatch_size", l.microbatch_size},
                      {"microbatches", l.microbatches},
                      {"schedule", l.schedule},
                      {"virtual_stages", l.virtual_stages},
                      {"zero", l.zero},
                      {"precision", l.precision},
                      {"recompute", l.recompute},
                      {"sp", l.sp},
                      {"vocab_parallel_head", l.vocab_parallel_head},
                      {"step_seconds", p.step_seconds},
                      {"tokens_per_s", p.tokens_per_s},
                      {"tflops_per_gpu", p.tflops_per_gpu},
                      {"mfu", p.mfu},
                      {"bubble_fraction", p.bubble_fraction},
                      {"exposed_comm_seconds", p.exposed_comm_seconds},
                      {"tp_crosses_nodes", p.tp_crosses_nodes},
                      {"memory_stage", p.worst_stage},
                      {"memory_bytes", memory}};
  if (moe) j["ep"] = l.ep;
  if (!s.why.empty()) j["why"] = s.why;
  return j;
}

}  // namespace

void print_plan(std::ostream& out, const plan::SearchRequest& r, const plan::SearchResult& result,
                const std::string& model_name, PlanDetail detail) {
  const GPTConfig& m = r.workload.model;
  const HardwareProfile& p = r.profile;
  const int nodes = (r.gpus + p.ranks_per_node - 1) / p.ranks_per_node;
  for (const std::string& note : result.notes) fmt::print(out, "note: {}\n", note);
  const size_t shown = std::min<size_t>(r.top, result.ranked.size());
  fmt::print(out,
             "\nbest {} of {} simulated layouts that fit, by tokens/s (every figure below is "
             "plan::simulate's modeled clock, never the screen's formula):\n",
             shown, result.ranked.size());
  if (shown == 0)
    fmt::print(out, "  none fits in {} per GPU: see the rejected ones below\n",
               gib(p.memory_capacity));
  else
    print_header(out, m.experts > 0);
  for (size_t i = 0; i < shown; ++i)
    print_row(out, std::to_string(i + 1), result.ranked[i], m.experts > 0);
  if (shown > 0) {
    const plan::Simulated& best = result.ranked[0];
    const DType dtype = parse_precision(best.layout.precision);
    fmt::print(out,
               "  tokens/s = {} x {} tokens / step time ({:.3f} s for #1); MFU = TFLOP/s per GPU "
               "/ the {} peak {:.1f} TFLOP/s; memory = the allocator's peak on the fullest "
               "stage\n",
               r.global_batch, m.seq_len, best.prediction.step_seconds, dtype_name(dtype),
               p.peak_for(dtype) / 1e12);
    if (m.experts > 0)
      fmt::print(out,
                 "  #1's {} experts per MoE block sit {} per GPU over ep {}: each MoE block "
                 "sends its routed tokens to them and back by two all-to-alls forward, two "
                 "backward\n",
                 m.experts, m.experts / best.layout.ep, best.layout.ep);
    if (best.layout.tp > 1)
      fmt::print(out, "  #1's tensor-parallel group {} a node ({} GPUs per node)\n",
                 best.prediction.tp_crosses_nodes ? "CROSSES" : "stays inside", p.ranks_per_node);
    else
      fmt::print(out, "  #1 has no tensor parallelism (tp 1): no all-reduce inside its layers\n");
  }
  if (detail == PlanDetail::brief) {
    fmt::print(out, "  ({} layouts enumerated, {} simulated, {} over capacity, in {:.1f} s)\n",
               result.enumerated, result.simulated, result.rejected.size(), result.wall_seconds);
    return;
  }
  std::vector<const plan::Simulated*> why;
  for (size_t i = shown; i < result.ranked.size() && why.size() < 4; ++i)
    why.push_back(&result.ranked[i]);
  if (!why.empty()) {
    fmt::print(out, "\nslower layouts, and why (vs #1):\n");
    for (const plan::Simulated* s : why)
      fmt::print(out, "  {:<62} {}\n", plan::describe(s->layout), s->why);
  }
  if (!result.rejected.empty()) {
    fmt::print(out, "\nrejected (simulated peak memory over the {} per GPU):\n",
               gib(p.memory_capacity));
    for (const plan::Simulated& s : result.rejected)
      fmt::print(out, "  {:<62} {:.2f} M tokens/s if it fit; {}\n", plan::describe(s.layout),
                 s.prediction.tokens_per_s / 1e6, s.why);
  }
  if (!result.refused.empty())
    fmt::print(out,
               "\nnot simulated: layouts the engine refuses today, among those the search "
               "reached (they join the search once it runs them):\n");
  for (const auto& [reason, count] : result.refused)
    fmt::print(out, "  {:>6} layouts: {}\n", count, reason);
  fmt::print(out,
             "\nsearched {} layouts of {} on {} GPUs ({} node{} of {}): {} over capacity even by "
             "the screen's lower bound (cannot fit; not simulated), {} simulated, in {:.1f} s\n",
             result.enumerated, model_name, r.gpus, nodes, nodes == 1 ? "" : "s", p.name,
             result.screened_out, result.simulated, result.wall_seconds);
}

nlohmann::json plan_json(const plan::SearchRequest& r, const plan::SearchResult& result,
                         const std::string& model_name) {
  const bool moe = r.workload.model.experts > 0;
  nlohmann::json ranked = nlohmann::json::array(), rejected = nlohmann::json::array();
  for (size_t i = 0; i < std::min<size_t>(r.top, result.ranked.size()); ++i)
    ranked.push_back(layout_json(result.ranked[i], moe));
  for (const plan::Simulated& s : result.rejected) rejected.push_back(layout_json(s, moe));
  nlohmann::json refused = nlohmann::json::array();
  for (const auto& [reason, count] : result.refused)
    refused.push_back({{"reason", reason}, {"layouts", count}});
  const GPTConfig& m = r.workload.model;
  const plan::Knobs knobs = plan::knobs(r.pins);
  nlohmann::json pinned = nlohmann::json::object();
  for (const auto& [option, value] : knobs.pinned) pinned[option.substr(2)] = value;
  nlohmann::json searched = nlohmann::json::array();
  for (const std::string& option : knobs.searched) searched.push_back(option.substr(2));
  nlohmann::json defaults = nlohmann::json::object();
  for (const auto& [option, value] : knobs.defaults) defaults[option.substr(2)] = value;
  return {{"model",
           {{"name", model_name},
            {"layers", m.layers},
            {"dim", m.dim},
            {"heads", m.heads},
            {"seq", m.seq_len},
            {"vocab", m.vocab}}},
          {"gpus", r.gpus},
          {"profile", r.profile.name},
          {"memory_capacity_bytes", r.profile.memory_capacity},
          {"global_batch", r.global_batch},
          {"pinned", pinned},
          {"searched", searched},
          {"defaults", defaults},
          {"layouts", ranked},
          {"rejected", rejected},
          {"refused", refused},
          {"notes", result.notes},
          {"enumerated", result.enumerated},
          {"screened_out", result.screened_out},
          {"simulated", result.simulated},
          {"wall_seconds", result.wall_seconds}};
}

}  // namespace mgpu::lessons

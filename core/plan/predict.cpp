// Reading the prediction off the simulated step: its window, bubble and exposed communication
// from each rank's events, the model FLOPs MFU is quoted in, and the memory of the fullest stage.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/model/gpt.h"
#include "core/plan/simulate.h"
#include "core/plan/simulate_internal.h"
#include "core/theory/model_states.h"
#include "core/trace/analysis.h"

namespace mgpu::plan {

namespace {

bool any_tp_group_crosses_nodes(const Layout& layout, const HardwareProfile& profile) {
  const int rpn = std::max(1, profile.ranks_per_node);
  for (int first = 0; first < layout.gpus(); first += layout.tp)
    if (first / rpn != (first + layout.tp - 1) / rpn) return true;
  return false;
}

// The model's FLOPs for one step, the count MFU is quoted in (PaLM, Chowdhery et al. 2022):
// 6 N per token for the matmuls over the parameters (2 N forward, 4 N backward; N counted by
// building the model on a phantom device) plus 12 L T C per token for attention's QK^T and AV,
// forward and backward, without halving for the causal mask (grouped-query attention shares the
// keys and values, not the H x D query channels: still 12 L T C). The embedding tables (wte, wpe)
// are looked up, not multiplied, so they are not in N (as in Kaplan et al. 2020): counted, they
// made MFU exceed 100% on an ideal profile. The LM head is a matmul and stays: its own matrix, or
// wte itself when the embeddings are tied (then wte is both looked up and multiplied: counted
// once). Recompute is not counted: MFU counts the model's FLOPs, not the hardware's.
double model_flops_per_step(const GPTConfig& cfg, int64_t tokens) {
  RankContext counting(0, 1, Device::phantom(0), HardwareProfile::ideal(0), ClockKind::modeled);
  counting.tracer.enabled = false;
  int64_t params = 0;
  {
    ScopedRank scoped(counting);
    params = GPT(cfg).num_params();
  }
  // wpe (none under RoPE), and an untied wte: lookups only (a tied wte is the head's matmul too).
  params -=
      (int64_t{cfg.tie_embeddings ? 0 : cfg.vocab} + (cfg.rope() ? 0 : cfg.seq_len)) * cfg.dim;
  // With experts a token multiplies only its top_k experts of each MoE block (Switch Transformer's
  // and Mixtral's active count).
  if (cfg.experts > 0) params -= theory::gpt_parameters(cfg) - theory::gpt_active_parameters(cfg);
  return theory::model_flops_per_token(params, cfg.layers, cfg.seq_len, cfg.dim) *
         static_cast<double>(tokens);
}

}  // namespace

namespace detail {

StepTimeline measure_step(const std::vector<RankSummary>& ranks, int step) {
  StepTimeline t;
  bool found = false;
  for (const RankSummary& mine : ranks)
    for (const auto& [s, span] : mine.steps)
      if (s == step) {
        t.window = found ? trace::Interval{std::min(t.window.begin, span.begin),
                                           std::max(t.window.end, span.end)}
                         : span;
        found = true;
      }
  if (!found || t.window.length() <= 0)
    throw std::logic_error(fmt::format("simulate: step {} left no time on the trace", step));
  double most_busy = -1;
  for (const RankSummary& mine : ranks) {
    const auto compute = mine.compute.clipped(t.window);
    const auto comm = mine.comm.clipped(t.window);
    const double busy = trace::total_length(compute);
    const double exposed =
        trace::total_length(comm) - trace::total_length(trace::intersect(compute, comm));
    if (busy > most_busy) {
      most_busy = busy;
      t.busiest_bubble_fraction = (t.window.length() - busy) / t.window.length();
    }
    t.worst_exposed_comm = std::max(t.worst_exposed_comm, exposed);
  }
  return t;
}

// Throughput, MFU, bubble and exposed communication of the measured step, and the memory of the
// rank that needs the most.
Prediction predict(const StepTimeline& timeline, const std::vector<RankMemory>& memory,
                   const GPTConfig& cfg, const Layout& layout, const HardwareProfile& profile) {
  Prediction p;
  p.step_seconds = timeline.window.length();
  const int64_t tokens = int64_t{layout.global_batch()} * cfg.seq_len;
  p.tokens_per_s = p.step_seconds > 0 ? static_cast<double>(tokens) / p.step_seconds : 0;
  p.tflops_per_gpu = p.step_seconds > 0
                         ? model_flops_per_step(cfg, tokens) / p.step_seconds / layout.gpus() / 1e12
                         : 0;
  const double peak = profile.peak_for(cfg.dtype);
  p.mfu = peak > 0 ? p.tflops_per_gpu * 1e12 / peak : 0;
  p.bubble_fraction = timeline.busiest_bubble_fraction;
  p.exposed_comm_seconds = timeline.worst_exposed_comm;
  for (const RankMemory& m : memory)
    if (m.stats.peak_total > p.memory_peak_total) {
      p.memory_peak_total = m.stats.peak_total;
      p.memory_peak = m.stats.peak;
      p.worst_stage = m.stage;
    }
  p.tp_crosses_nodes = any_tp_group_crosses_nodes(layout, profile);
  return p;
}

}  // namespace detail

}  // namespace mgpu::plan

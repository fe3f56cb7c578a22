// The layout as the engine's options: the model and hybrid options a layout trains with (refused
// in one line when the layout cannot run), its optimizer, and Megatron's tensor-parallel choices.
#include <algorithm>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "core/optim/mixed_precision.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/hybrid_megatron.h"
#include "core/plan/simulate.h"
#include "core/plan/simulate_internal.h"

namespace mgpu::plan {

namespace {

// The phantom device routes by a fixed balanced rule (balanced_routing: slot s to expert s % E),
// keeping a few bytes per (token, expert) slot of every micro-batch in flight. Over ep ranks the
// symmetric groups take what a rank receives to be what it sends, which holds when every rank's
// experts get as many rows: for dropless routing, when a micro-batch's slots are a multiple of
// the experts (with a capacity the exchange itself checks). Both refusals name no layout's own
// figures, so the planner lists each once.
constexpr int64_t kMaxRoutedSlots = int64_t{1} << 22;

void check_phantom_routing(const GPTConfig& cfg, const Layout& l) {
  if (cfg.experts == 0) return;
  const int64_t slots = int64_t{l.microbatch_size} * (cfg.seq_len / l.cp) * cfg.top_k;
  if (slots > kMaxRoutedSlots)
    throw std::invalid_argument(fmt::format(
        "a micro-batch's tokens x top-k above {} routing slots per rank are not simulated: use "
        "a smaller --microbatch-size or top-k",
        kMaxRoutedSlots));
  if (l.ep > 1 && cfg.capacity_factor == 0 && slots % cfg.experts != 0)
    throw std::invalid_argument(fmt::format(
        "the phantom device routes every token the same balanced way, which loads the ep ranks' "
        "experts unequally unless a micro-batch's tokens x top-k are a multiple of the {} "
        "experts: not simulated",
        cfg.experts));
}

}  // namespace

namespace detail {

GPTConfig model_for(const Workload& workload, const Layout& layout) {
  GPTConfig cfg = workload.model;
  cfg.dtype = parse_precision(layout.precision);
  cfg.recompute = parse_recompute(layout.recompute);
  return cfg;
}

parallel::HybridOptions hybrid_options(const GPTConfig& cfg, const Workload& workload,
                                       const Layout& layout) {
  if (layout.microbatch_size < 1 || layout.microbatches < 1)
    throw std::invalid_argument(
        fmt::format("micro-batch size {} and {} micro-batches: both must be at least 1",
                    layout.microbatch_size, layout.microbatches));
  if (workload.optimizer != "adamw" && workload.optimizer != "sgd")
    throw std::invalid_argument(
        fmt::format("optimizer '{}': the planner simulates adamw or sgd", workload.optimizer));
  if (workload.optimizer == "sgd" && cfg.dtype != DType::f32)
    throw std::invalid_argument(
        fmt::format("sgd has no fp32 master weights for {}: use adamw or fp32", layout.precision));
  cfg.validate();
  parallel::HybridOptions options{.schedule = layout.schedule,
                                  .microbatches = layout.microbatches,
                                  .virtual_stages = layout.virtual_stages,
                                  .zero = layout.zero};
  options.mesh = {
      .tp = layout.tp, .cp = layout.cp, .dp = layout.dp, .pp = layout.pp, .ep = layout.ep};
  options.sequence_parallel = layout.sp;
  options.vocab_parallel_head = layout.vocab_parallel_head;
  if (cfg.dtype != DType::f32) options.tp_sums = parallel::PartialSums::activation_dtype;
  parallel::check_hybrid(cfg, options, layout.gpus(), layout.global_batch());
  check_phantom_routing(cfg, layout);
  return options;
}

train::OptimizerFactory optimizer_factory(const Workload& workload, DType precision) {
  return [optimizer = workload.optimizer,
          precision](const ParamList& params) -> std::unique_ptr<optim::Optimizer> {
    if (optimizer == "sgd")
      return std::make_unique<optim::SGD>(optim::whole_params(params), optim::SGDOptions{});
    return optim::make_adamw(optim::whole_params(params), precision);
  };
}

}  // namespace detail

Layout with_megatron_choices(const GPTConfig& model, Layout l) {
  // Each on wherever the hybrid engine's own rules accept it (one source for them).
  auto accepted = [&](bool sp, bool head) {
    parallel::HybridOptions o{
        .schedule = l.schedule, .vocab_parallel_head = head, .sequence_parallel = sp};
    o.mesh = {.tp = l.tp, .cp = l.cp, .dp = l.dp, .pp = l.pp};
    return parallel::megatron_options_refusal(model, o).empty();
  };
  l.sp = accepted(true, false);
  l.vocab_parallel_head = accepted(false, true);
  return l;
}

}  // namespace mgpu::plan

// The search's first step: every layout the hybrid engine's rules allow, honouring the pins, and
// what would work when the pins leave none.
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/parallel/context_parallel.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/tensor_parallel.h"
#include "core/plan/search.h"
#include "core/plan/search_internal.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::plan {

namespace detail {

// ZB-V and DualPipeV: two model chunks per stage in a V (pipeline/schedule.h).
bool is_v_schedule(const std::string& schedule) {
  const auto kind = theory::find_schedule(schedule);
  return kind && theory::traits(*kind).v_shape;
}

}  // namespace detail

namespace {

// Ascending; O(sqrt n), so a global batch of millions enumerates at once.
std::vector<int> divisors(int n) {
  std::vector<int> low, high;
  for (int i = 1; int64_t{i} * i <= n; ++i)
    if (n % i == 0) {
      low.push_back(i);
      if (i != n / i) high.push_back(n / i);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

template <class T>
bool allowed(const std::optional<T>& pin, const T& value) {
  return !pin || *pin == value;
}

// The model's own rule (parallel::tp_divides): tp divides the heads, the kv heads (grouped-query
// attention keeps whole kv heads per rank) and the MLP width F.
bool tp_fits(const GPTConfig& m, int tp) {
  return parallel::tp_divides(m, tp);
}

// The stages' rule (theory::pipeline_stages_fit): pp divides the layers, or splits them within
// 2% of even (Llama 3 405B's 126 layers on 16 stages).
bool pp_fits(const GPTConfig& m, int pp) {
  return theory::pipeline_stages_fit(m.layers, pp);
}

bool cp_fits(const GPTConfig& m, int cp) {
  if (cp == 1) return true;
  try {  // the context-parallel layout the hybrid engine would use: zigzag ring attention
    parallel::check_cp_size(m, m.seq_len, cp, parallel::CpLayout::zigzag);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// Expert-parallel sizes of a replica set of `dp`: 1 for a dense model; with experts, every
// divisor of dp that also divides the experts (the ep group is carved out of the dp ranks, each
// holding experts / ep whole experts).
std::vector<int> expert_parallel_sizes(const GPTConfig& m, int dp) {
  if (m.experts <= 0) return {1};
  std::vector<int> sizes;
  for (int ep : divisors(dp))
    if (m.experts % ep == 0) sizes.push_back(ep);
  return sizes;
}

// A schedule with its chunk count per stage.
struct ScheduleVariant {
  std::string schedule;
  int virtual_stages = 1;
};

// The schedules a replica of M micro-batches over pp stages can run, each with its chunk count:
// interleaved V (pp x V dividing the layers and M >= pp, the hybrid layout's rules), the others 1
// (the V schedules' two chunks are their own).
std::vector<ScheduleVariant> schedule_variants(const GPTConfig& m, int pp, int M,
                                               const Pins& pins) {
  std::vector<ScheduleVariant> variants;
  for (const theory::ScheduleTraits& traits : theory::all_schedules()) {
    if (!traits.runs_on_mesh) continue;
    const std::string schedule = traits.name;
    // One stage: every schedule is plain gradient accumulation; keep 1f1b.
    const bool plain = traits.kind == theory::ScheduleKind::one_f_one_b;
    if (pins.schedule ? *pins.schedule != schedule : pp == 1 && !plain) continue;
    // An MoE block's backward is one piece: no zero-bubble B/W split.
    if (m.experts > 0 && traits.splits_backward) continue;
    // The V schedules: two chunks per stage, and enough micro-batches for their warmup.
    if (traits.v_shape &&
        (pp == 1 || m.layers % (2 * pp) != 0 || M < pipeline::min_microbatches(schedule, pp)))
      continue;
    // DualPipe: an even pp (the two copies meet in the middle), M even and at least 2pp.
    if (traits.bidirectional &&
        (pp % 2 != 0 || M % 2 != 0 || M < pipeline::min_microbatches(schedule, pp)))
      continue;
    if (!traits.takes_virtual_stages) {
      if (allowed(pins.virtual_stages, 1)) variants.push_back({schedule, 1});
      continue;
    }
    if (pp == 1 || M < pp) continue;
    // Every V the layers allow (pp x V divides them), or the pinned one.
    for (int v = 2; pp * v <= m.layers; ++v)
      if (m.layers % (pp * v) == 0 && allowed(pins.virtual_stages, v))
        variants.push_back({schedule, v});
  }
  return variants;
}

// Megatron's choices as the pins say: unpinned, on wherever the engine runs them; pinned off,
// off; pinned on, only where the engine runs them (nullopt otherwise).
std::optional<Layout> with_pinned_choices(const GPTConfig& m, const Layout& l, const Pins& pins) {
  Layout chosen = with_megatron_choices(m, l);
  if (pins.sp) {
    if (*pins.sp && !chosen.sp) return std::nullopt;
    chosen.sp = *pins.sp;
  }
  if (pins.vocab_head) {
    if (*pins.vocab_head && !chosen.vocab_parallel_head) return std::nullopt;
    chosen.vocab_parallel_head = *pins.vocab_head;
  }
  return chosen;
}

// Every ZeRO stage, recompute mode and precision of one mesh and schedule.
void add_state_variants(const GPTConfig& m, const Layout& base, const Pins& pins,
                        const std::vector<std::string>& precisions, std::vector<Layout>& layouts) {
  for (int zero = 0; zero <= 3; ++zero) {
    // Searched: 0, and ZeRO-1 where dp > 1 (over one replica it shards nothing). ZeRO-2/3 keep
    // ZeRO-1's peak here (the whole gradients and parameters live through the step): pinned only.
    if (pins.zero ? *pins.zero != zero : zero > 1 || (base.dp == 1 && zero == 1)) continue;
    for (const char* recompute : {"none", "selective", "full"}) {
      if (!allowed(pins.recompute, std::string(recompute))) continue;
      for (const std::string& precision : precisions) {
        Layout l = base;
        l.zero = zero;
        l.precision = precision;
        l.recompute = recompute;
        if (const auto chosen = with_pinned_choices(m, l, pins)) layouts.push_back(*chosen);
      }
    }
  }
}

std::vector<Layout> enumerate_unchecked(const GPTConfig& m, int gpus, int global_batch,
                                        const Pins& pins) {
  std::vector<Layout> layouts;
  const std::vector<std::string> precisions =
      pins.precisions.empty() ? std::vector<std::string>{"bf16"} : pins.precisions;
  for (int tp : divisors(gpus)) {
    if (!allowed(pins.tp, tp) || !tp_fits(m, tp)) continue;
    for (int cp : divisors(gpus / tp)) {
      if (!allowed(pins.cp, cp) || !cp_fits(m, cp)) continue;
      for (int pp : divisors(gpus / (tp * cp))) {
        const int dp = gpus / (tp * cp * pp);
        if (!allowed(pins.pp, pp) || !allowed(pins.dp, dp) || !pp_fits(m, pp)) continue;
        if (global_batch % dp != 0) continue;
        const int per_replica = global_batch / dp;
        for (int ep : expert_parallel_sizes(m, dp))
          for (int mbs : divisors(per_replica)) {
            if (!allowed(pins.ep, ep) || !allowed(pins.microbatch_size, mbs)) continue;
            const int M = per_replica / mbs;
            for (const ScheduleVariant& v : schedule_variants(m, pp, M, pins))
              add_state_variants(m,
                                 Layout{.dp = dp,
                                        .tp = tp,
                                        .pp = pp,
                                        .cp = cp,
                                        .ep = ep,
                                        .microbatch_size = mbs,
                                        .microbatches = M,
                                        .schedule = v.schedule,
                                        .virtual_stages = v.virtual_stages},
                                 pins, precisions, layouts);
          }
      }
    }
  }
  return layouts;
}

// The hybrid engine's own check on the mesh (cp aside: ring attention's rule is cp_fits). The
// enumeration follows the same rules, so this never throws; it keeps the two from drifting.
void confirm_with_engine_rules(const GPTConfig& m, const Layout& l, int global_batch) {
  parallel::HybridOptions o{
      .schedule = l.schedule, .microbatches = l.microbatches, .virtual_stages = l.virtual_stages};
  o.mesh.tp = l.tp;
  o.mesh.dp = l.dp;
  o.mesh.pp = l.pp;
  o.mesh.ep = l.ep;
  o.sequence_parallel = l.sp;
  o.vocab_parallel_head = l.vocab_parallel_head;
  parallel::check_hybrid(m, o, l.dp * l.tp * l.pp, global_batch);
}

std::string join_ints(const std::set<int>& values) {
  return fmt::format("{}", fmt::join(values, ", "));
}

// No layout: say which pin rules everything out and which values of it would work.
[[noreturn]] void explain_no_layout(const GPTConfig& m, int gpus, int global_batch,
                                    const Pins& pins) {
  const std::string model =
      fmt::format("{} layers, {} heads, width {}, seq {}", m.layers, m.heads, m.dim, m.seq_len);
  struct Axis {
    const char* option;
    std::optional<int> Pins::*pin;
    int Layout::*field;
  };
  const Axis axes[] = {{"--tp", &Pins::tp, &Layout::tp},
                       {"--pp", &Pins::pp, &Layout::pp},
                       {"--dp", &Pins::dp, &Layout::dp},
                       {"--cp", &Pins::cp, &Layout::cp},
                       {"--ep", &Pins::ep, &Layout::ep},
                       {"--microbatch-size", &Pins::microbatch_size, &Layout::microbatch_size},
                       {"--zero", &Pins::zero, &Layout::zero},
                       {"--virtual-stages", &Pins::virtual_stages, &Layout::virtual_stages}};
  for (const Axis& a : axes) {
    if (!(pins.*a.pin)) continue;
    Pins without = pins;
    (without.*a.pin).reset();
    std::set<int> works;
    for (const Layout& l : enumerate_unchecked(m, gpus, global_batch, without))
      works.insert(l.*a.field);
    if (works.empty()) continue;
    const std::string kv =
        m.kv_head_count() != m.heads ? fmt::format(", {} kv heads", m.kv_head_count()) : "";
    const std::string tp_rule =
        a.pin == &Pins::tp && !tp_fits(m, *pins.tp)
            ? fmt::format(" ({} heads{}, MLP width {})", m.heads, kv, m.ffn_hidden())
            : "";
    throw std::invalid_argument(
        fmt::format("no layout of the model ({}) on {} GPUs with {} {}{}: "
                    "{} {} would work",
                    model, gpus, a.option, *(pins.*a.pin), tp_rule, a.option, join_ints(works)));
  }
  // Megatron's two choices, pinned on where the engine runs neither on these layouts.
  const std::pair<const char*, std::optional<bool> Pins::*> choices[] = {
      {"--sp", &Pins::sp}, {"--vocab-head", &Pins::vocab_head}};
  for (const auto& [option, pin] : choices) {
    if (!(pins.*pin) || !*(pins.*pin)) continue;
    Pins without = pins;
    (without.*pin).reset();
    if (!enumerate_unchecked(m, gpus, global_batch, without).empty())
      throw std::invalid_argument(fmt::format(
          "{} on: the engine runs it on none of the layouts the other pins allow ({}): use {} "
          "off, or pin a layout that takes it",
          option,
          pin == &Pins::sp ? "sequence parallelism needs tp > 1 dividing the sequence, no cp and "
                             "a schedule without zero-bubble's split backward"
                           : "the vocabulary-parallel head needs tp > 1 dividing the vocabulary "
                             "and untied embeddings",
          option));
  }
  Pins none;
  if (enumerate_unchecked(m, gpus, global_batch, none).empty()) {
    std::set<int> dps;
    for (int tp : divisors(gpus))
      for (int cp : divisors(gpus / tp))
        for (int pp : divisors(gpus / (tp * cp)))
          if (tp_fits(m, tp) && cp_fits(m, cp) && pp_fits(m, pp)) dps.insert(gpus / (tp * cp * pp));
    if (dps.empty())
      throw std::invalid_argument(fmt::format(
          "no layout of the model ({}) on {} GPUs: tp must divide the heads and pp the layers; "
          "use a GPU count like {}",
          model, gpus, m.heads));
    throw std::invalid_argument(fmt::format(
        "global batch {} splits over none of the data-parallel sizes possible on {} GPUs ({}): "
        "use --global-batch {}",
        global_batch, gpus, join_ints(dps), (global_batch / *dps.begin() + 1) * *dps.begin()));
  }
  throw std::invalid_argument(fmt::format(
      "no layout of the model ({}) on {} GPUs satisfies these pins together: drop one of them",
      model, gpus));
}

}  // namespace

std::string describe(const Layout& l) {
  return fmt::format(
      "dp {} tp {} pp {} cp {}{} mbs {} M {} {}{} zero {} {} {}{}{}", l.dp, l.tp, l.pp, l.cp,
      l.ep > 1 ? fmt::format(" ep {}", l.ep) : "", l.microbatch_size, l.microbatches, l.schedule,
      l.virtual_stages > 1 ? fmt::format(" V {}", l.virtual_stages) : "", l.zero, l.precision,
      l.recompute, l.sp ? " sp" : "", l.vocab_parallel_head ? " vocab-head" : "");
}

Knobs knobs(const Pins& pins) {
  Knobs k;
  auto knob = [&](const char* option, const auto& pin, auto text) {
    if (pin)
      k.pinned.emplace_back(option, text(*pin));
    else
      k.searched.emplace_back(option);
  };
  const auto number = [](int v) { return std::to_string(v); };
  const auto word = [](const std::string& v) { return v; };
  const auto on_off = [](bool v) { return std::string(v ? "on" : "off"); };
  knob("--dp", pins.dp, number);
  knob("--tp", pins.tp, number);
  knob("--pp", pins.pp, number);
  knob("--cp", pins.cp, number);
  knob("--ep", pins.ep, number);
  knob("--microbatch-size", pins.microbatch_size, number);
  knob("--schedule", pins.schedule, word);
  knob("--virtual-stages", pins.virtual_stages, number);
  knob("--zero", pins.zero, number);
  knob("--sp", pins.sp, on_off);
  knob("--vocab-head", pins.vocab_head, on_off);
  knob("--recompute", pins.recompute, word);
  // No --precision: bf16 (the search's default, not searched); "any": all three searched.
  if (pins.precisions.empty())
    k.defaults.emplace_back("--precision", "bf16");
  else
    knob("--precision",
         pins.precisions.size() == 1 ? std::optional(pins.precisions[0]) : std::nullopt, word);
  return k;
}

std::vector<Layout> enumerate_layouts(const GPTConfig& model, int gpus, int global_batch,
                                      const Pins& pins) {
  if (gpus < 1) throw std::invalid_argument(fmt::format("--gpus must be positive, got {}", gpus));
  if (global_batch < 1)
    throw std::invalid_argument(
        fmt::format("--global-batch must be positive, got {}", global_batch));
  if (pins.ep && *pins.ep > 1 && model.experts <= 0)
    throw std::invalid_argument(fmt::format(
        "--ep {} splits a model's experts over ranks, and this model is dense (no experts): drop "
        "--ep, or plan a model with experts",
        *pins.ep));
  if (pins.schedule && model.experts > 0 && parallel::splits_backward(*pins.schedule))
    throw std::invalid_argument(fmt::format(
        "--schedule {} splits the backward (zero-bubble's B and W), which mixture-of-experts "
        "blocks do not: use --schedule 1f1b, gpipe or interleaved",
        *pins.schedule));
  std::vector<Layout> layouts = enumerate_unchecked(model, gpus, global_batch, pins);
  if (layouts.empty()) explain_no_layout(model, gpus, global_batch, pins);
  for (const Layout& l : layouts) confirm_with_engine_rules(model, l, global_batch);
  return layouts;
}

}  // namespace mgpu::plan

// The planner's search, top to bottom (see search.h for the idea):
//   1. enumerate the layouts the hybrid engine's rules allow, honouring the pins, and say what
//      would work when the pins leave none;
//   2. the screen (screen.cpp): formula estimates that only decide which layouts get simulated;
//   3. simulate in screen order (one best layout per mesh first, so the table compares meshes),
//      skip what the engine refuses, reject what does not fit, rank the rest by tokens/s.
#include "core/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/parallel/context_parallel.h"
#include "core/parallel/hybrid.h"
#include "core/runtime/world.h"
#include "core/tensor/allocator.h"

namespace mgpu::plan {

namespace {

// ZB-V and DualPipeV: two model chunks per stage in a V (pipeline/schedule.h).
bool is_v_schedule(const std::string& schedule) {
  return schedule == "zbv" || schedule == "dualpipev";
}

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

bool tp_fits(const GPTConfig& m, int tp) {
  return m.heads % tp == 0 && (4 * m.dim) % tp == 0;
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
        if (!allowed(pins.pp, pp) || !allowed(pins.dp, dp) || m.layers % pp != 0) continue;
        if (global_batch % dp != 0) continue;
        const int per_replica = global_batch / dp;
        for (int ep : expert_parallel_sizes(m, dp))
          for (int mbs : divisors(per_replica)) {
            if (!allowed(pins.ep, ep)) continue;
            if (!allowed(pins.microbatch_size, mbs)) continue;
            for (const std::string schedule :
                 {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev", "dualpipe"}) {
              // One stage: every schedule is plain gradient accumulation; keep 1f1b.
              if (pins.schedule ? *pins.schedule != schedule : pp == 1 && schedule != "1f1b")
                continue;
              // An MoE block's backward is one piece: no zero-bubble B/W split.
              if (m.experts > 0 && parallel::splits_backward(schedule)) continue;
              // Interleaved with V = 2 chunks per stage (the hybrid layout's rule: pp x V divides
              // the layers, at least pp micro-batches); larger V only adds pp traffic here.
              const bool interleaved = schedule == "interleaved";
              if (interleaved && (pp == 1 || m.layers % (2 * pp) != 0 || per_replica / mbs < pp))
                continue;
              // The V schedules: two chunks per stage, and enough micro-batches for their warmup.
              const bool v_shape = is_v_schedule(schedule);
              if (v_shape && (pp == 1 || m.layers % (2 * pp) != 0 ||
                              per_replica / mbs < pipeline::min_microbatches(schedule, pp)))
                continue;
              // DualPipe: an even pp (the two copies meet in the middle), M even and at least 2pp.
              const int M = per_replica / mbs;
              if (schedule == "dualpipe" &&
                  (pp % 2 != 0 || M % 2 != 0 || M < pipeline::min_microbatches(schedule, pp)))
                continue;
              for (int zero : {0, 1}) {
                // ZeRO-1 over one replica shards nothing: searched only where dp > 1.
                if (pins.zero ? *pins.zero != zero : dp == 1 && zero == 1) continue;
                for (const char* recompute : {"none", "selective", "full"}) {
                  if (!allowed(pins.recompute, std::string(recompute))) continue;
                  for (const std::string& precision : precisions) {
                    Layout l{.dp = dp,
                             .tp = tp,
                             .pp = pp,
                             .cp = cp,
                             .ep = ep,
                             .microbatch_size = mbs,
                             .microbatches = per_replica / mbs,
                             .schedule = schedule,
                             .virtual_stages = interleaved ? 2 : 1,
                             .zero = zero,
                             .precision = precision,
                             .recompute = recompute};
                    layouts.push_back(with_megatron_choices(m, l));
                  }
                }
              }
            }
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
                       {"--zero", &Pins::zero, &Layout::zero}};
  for (const Axis& a : axes) {
    if (!(pins.*a.pin)) continue;
    Pins without = pins;
    (without.*a.pin).reset();
    std::set<int> works;
    for (const Layout& l : enumerate_unchecked(m, gpus, global_batch, without))
      works.insert(l.*a.field);
    if (works.empty()) continue;
    const std::string tp_rule = a.pin == &Pins::tp && !tp_fits(m, *pins.tp)
                                    ? fmt::format(" ({} heads, MLP width {})", m.heads, 4 * m.dim)
                                    : "";
    throw std::invalid_argument(
        fmt::format("no layout of the model ({}) on {} GPUs with {} {}{}: "
                    "{} {} would work",
                    model, gpus, a.option, *(pins.*a.pin), tp_rule, a.option, join_ints(works)));
  }
  Pins none;
  if (enumerate_unchecked(m, gpus, global_batch, none).empty()) {
    std::set<int> dps;
    for (int tp : divisors(gpus))
      for (int cp : divisors(gpus / tp))
        for (int pp : divisors(gpus / (tp * cp)))
          if (tp_fits(m, tp) && cp_fits(m, cp) && m.layers % pp == 0)
            dps.insert(gpus / (tp * cp * pp));
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
  return fmt::format("dp {} tp {} pp {} cp {}{} mbs {} M {} {} zero {} {} {}{}{}", l.dp, l.tp,
                     l.pp, l.cp, l.ep > 1 ? fmt::format(" ep {}", l.ep) : "", l.microbatch_size,
                     l.microbatches, l.schedule, l.zero, l.precision, l.recompute,
                     l.sp ? " sp" : "", l.vocab_parallel_head ? " vocab-head" : "");
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

// ---------------------------------------------------------------------------------- the search

namespace {

// What the engine refuses depends on the options (cp > 1, ZeRO) and on the mesh (more stages
// than threads, stages that cannot be placed on nodes), never on how the batch is cut: one
// refusal covers every micro-batching of the same mesh and options.
auto refusal_key(const Layout& l) {
  return std::tuple(l.dp, l.tp, l.pp, l.cp, l.ep, l.zero, l.precision, l.schedule, l.recompute);
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

// Why `other` is slower than `best`: its step split into bubble, exposed communication and the
// rest (compute); the part that grew most, in seconds, is the reason (a tp group leaving the node
// is named when that is where its communication comes from).
std::string why_slower(const Simulated& best, const Simulated& other) {
  const Prediction &b = best.prediction, &o = other.prediction;
  auto bubble = [](const Prediction& p) { return p.bubble_fraction * p.step_seconds; };
  auto compute = [&](const Prediction& p) {
    return p.step_seconds - bubble(p) - p.exposed_comm_seconds;
  };
  const double more_bubble = bubble(o) - bubble(b);
  const double more_comm = o.exposed_comm_seconds - b.exposed_comm_seconds;
  const double more_compute = compute(o) - compute(b);
  std::string reason;
  if (more_comm >= more_bubble && more_comm >= more_compute)
    reason = fmt::format("exposed communication {:.2f} s vs {:.2f} s{}", o.exposed_comm_seconds,
                         b.exposed_comm_seconds,
                         o.tp_crosses_nodes && !b.tp_crosses_nodes
                             ? " (its tensor-parallel group crosses nodes)"
                             : "");
  else if (more_bubble >= more_compute)
    // "bubble" is a pipeline schedule's idle time; without a pipeline it is just idle.
    reason = fmt::format("{} {:.2f} s ({:.1f}%) vs {:.2f} s ({:.1f}%)",
                         other.layout.pp > 1 ? "bubble" : "idle", bubble(o),
                         100 * o.bubble_fraction, bubble(b), 100 * b.bubble_fraction);
  else
    reason = fmt::format("compute {:.2f} s vs {:.2f} s (recompute {}, micro-batch {})", compute(o),
                         compute(b), other.layout.recompute, other.layout.microbatch_size);
  const double slower = b.tokens_per_s / std::max(o.tokens_per_s, 1e-30) - 1;
  return fmt::format("{:.0f}% slower: {}", 100 * slower, reason);
}

}  // namespace

namespace {

// The screen's verdict on every layout: fits (by formula, with a 5% margin so near misses are
// still simulated) or over, each side in estimated-time order.
struct Screened {
  std::vector<Candidate> fits, over;
};

Screened screen_all(const GPTConfig& model, const std::vector<Layout>& layouts,
                    const HardwareProfile& profile, double capacity) {
  Screened s;
  for (const Layout& l : layouts) {
    const Screen sc = screen_layout(model, l, profile);
    (sc.memory_bytes > 1.05 * capacity ? s.over : s.fits).push_back({l, sc});
  }
  // Equal estimates (gpipe and 1f1b of one mesh): the one needing less memory first.
  auto by_time = [](const Candidate& a, const Candidate& b) {
    return std::pair(a.screen.step_seconds, a.screen.memory_bytes) <
           std::pair(b.screen.step_seconds, b.screen.memory_bytes);
  };
  std::stable_sort(s.fits.begin(), s.fits.end(), by_time);
  std::stable_sort(s.over.begin(), s.over.end(), by_time);
  return s;
}

// The order to simulate in: the best candidate of each mesh first (half the budget), so the
// table compares meshes rather than micro-batch sizes of one; then the rest by estimate, except
// that a layout differing from one already queued only by its schedule waits until the end
// (same estimated time, more memory: gpipe beside 1f1b would mostly repeat a row).
std::vector<const Candidate*> simulation_order(const std::vector<Candidate>& fits,
                                               int max_simulated) {
  std::vector<const Candidate*> order, twins;
  std::set<std::tuple<int, int, int, int, int>> meshes;
  std::set<const Candidate*> taken;
  auto but_schedule = [](const Layout& l) {
    return std::tuple(l.dp, l.tp, l.pp, l.cp, l.ep, l.microbatch_size, l.zero, l.precision,
                      l.recompute);
  };
  std::set<decltype(but_schedule(Layout{}))> queued;
  for (const Candidate& c : fits)
    if (meshes.insert({c.layout.dp, c.layout.tp, c.layout.pp, c.layout.cp, c.layout.ep}).second &&
        static_cast<int>(order.size()) < std::max(1, max_simulated / 2)) {
      order.push_back(&c), taken.insert(&c);
      queued.insert(but_schedule(c.layout));
    }
  for (const Candidate& c : fits)
    if (!taken.contains(&c))
      (queued.insert(but_schedule(c.layout)).second ? order : twins).push_back(&c);
  order.insert(order.end(), twins.begin(), twins.end());
  // Context parallelism shrinks activations so much that the screen can fill the budget with cp
  // layouts only; the best layout without cp is always simulated too, so the table shows what cp
  // buys (a pin of --cp makes this moot).
  const auto budget = static_cast<std::ptrdiff_t>(std::max(1, max_simulated));
  auto bring_into_budget = [&](auto&& wanted) {
    auto it = std::find_if(order.begin(), order.end(), wanted);
    if (it == order.end() || it - order.begin() < budget) return;
    const Candidate* moved = *it;
    order.erase(it);
    order.insert(order.begin() + std::min<std::ptrdiff_t>(budget / 2, order.size()), moved);
  };
  bring_into_budget([](const Candidate* c) { return c->layout.cp == 1; });
  // Likewise the screen's closed-form bubbles favour the V schedules (ZB-V, DualPipeV) enough to
  // fill the budget with them, while their head-and-embedding stage often makes them slower when
  // simulated: the best layout of the other placement is always simulated too.
  bring_into_budget([](const Candidate* c) { return !is_v_schedule(c->layout.schedule); });
  bring_into_budget([](const Candidate* c) { return is_v_schedule(c->layout.schedule); });
  return order;
}

// Runs the simulator on layouts one at a time, remembering what the engine refused: one refusal
// covers every layout with the same refusal_key, which is then not asked again.
class SimulationRuns {
 public:
  SimulationRuns(const SearchRequest& r, const Simulator& run, const Progress& progress,
                 double capacity, SearchResult& result)
      : r_(r), run_(run), progress_(progress), capacity_(capacity), result_(result) {}

  // True when `l` was simulated (fitting or not); false when the engine refused it.
  bool simulate(const Layout& l, int planned) {
    if (auto it = refusals_.find(refusal_key(l)); it != refusals_.end()) {
      ++result_.refused[it->second];
      return false;
    }
    try {
      Prediction p = run_(r_.workload, l, r_.profile);
      ++result_.simulated;
      if (progress_) progress_(result_.simulated, planned, l, p);
      const bool fits_memory = static_cast<double>(p.memory_peak_total) <= capacity_;
      simulated_.push_back({l, p, fits_memory, ""});
      return true;
    } catch (const std::invalid_argument& e) {
      refuse(l, e.what());
      return false;
    } catch (const RankError& e) {  // a refusal found on a stage thread is still a refusal
      try {
        if (e.cause()) std::rethrow_exception(e.cause());
      } catch (const std::invalid_argument& cause) {
        refuse(l, cause.what());
        return false;
      } catch (...) {
      }
      throw;
    }
  }

  // Counts every enumerated layout the refusals met cover (layouts never reached are not
  // counted: the engine was not asked about them).
  void count_refusals(const std::vector<Layout>& layouts) {
    result_.refused.clear();
    for (const Layout& l : layouts)
      if (auto it = refusals_.find(refusal_key(l)); it != refusals_.end())
        ++result_.refused[it->second];
  }

  std::vector<Simulated>& simulated() { return simulated_; }

 private:
  void refuse(const Layout& l, const std::string& reason) {
    refusals_[refusal_key(l)] = reason;
    result_.refused_example.try_emplace(reason, l);
  }

  const SearchRequest& r_;
  const Simulator& run_;
  const Progress& progress_;
  double capacity_;
  SearchResult& result_;
  std::map<decltype(refusal_key(Layout{})), std::string> refusals_;
  std::vector<Simulated> simulated_;
};

// Ranks what fits by tokens/s and says why each one is slower than the best; what does not fit
// is rejected with its excess.
void rank_simulated(std::vector<Simulated>& simulated, const HardwareProfile& profile,
                    SearchResult& result) {
  auto by_speed = [](const Simulated& a, const Simulated& b) {
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  };
  for (Simulated& s : simulated) (s.fits ? result.ranked : result.rejected).push_back(s);
  std::stable_sort(result.ranked.begin(), result.ranked.end(), by_speed);
  std::stable_sort(result.rejected.begin(), result.rejected.end(), by_speed);
  for (Simulated& s : result.rejected)
    s.why = fmt::format("out of memory: {} per GPU > {} capacity (+{})",
                        gib(s.prediction.memory_peak_total), gib(profile.memory_capacity),
                        gib(s.prediction.memory_peak_total - profile.memory_capacity));
  for (size_t i = 1; i < result.ranked.size(); ++i)
    result.ranked[i].why = why_slower(result.ranked[0], result.ranked[i]);
}

SearchResult search_precisions(const SearchRequest& r, const Progress& progress,
                               const Simulator& simulator) {
  const auto started = std::chrono::steady_clock::now();
  const Simulator run =
      simulator ? simulator : [](const Workload& w, const Layout& l, const HardwareProfile& p) {
        return simulate(w, l, p);
      };
  SearchResult result;
  const std::vector<Layout> layouts =
      enumerate_layouts(r.workload.model, r.gpus, r.global_batch, r.pins);
  result.enumerated = static_cast<int64_t>(layouts.size());
  const double capacity =
      r.profile.memory_capacity > 0 ? static_cast<double>(r.profile.memory_capacity) : 1e300;
  Screened screened = screen_all(r.workload.model, layouts, r.profile, capacity);
  result.screened_out = static_cast<int64_t>(screened.over.size());

  SimulationRuns runs(r, run, progress, capacity, result);
  const int planned = r.max_simulated + std::min<int>(r.rejected_probes, screened.over.size());
  // Simulate in screen order until max_simulated ran; when none of them fits the capacity (the
  // screen's memory formula was optimistic), go on down the list, up to three times as many.
  int ran = 0, fitting = 0;
  for (const Candidate* c : simulation_order(screened.fits, r.max_simulated)) {
    if (ran >= 3 * r.max_simulated || (ran >= r.max_simulated && fitting > 0)) break;
    if (runs.simulate(c->layout, planned)) {
      ++ran;
      fitting += runs.simulated().back().fits ? 1 : 0;
    }
  }
  // The fastest layouts the screen found over capacity but by less than half of it again (the
  // near misses worth explaining): simulated so "why not" has real numbers.
  std::stable_partition(screened.over.begin(), screened.over.end(), [&](const Candidate& c) {
    return static_cast<double>(c.screen.memory_bytes) < 1.5 * capacity;
  });
  int probes = 0;
  for (const Candidate& c : screened.over) {
    if (probes >= r.rejected_probes) break;
    if (runs.simulate(c.layout, planned)) ++probes;
  }
  runs.count_refusals(layouts);
  rank_simulated(runs.simulated(), r.profile, result);
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace

SearchResult search(const SearchRequest& request, const Progress& progress,
                    const Simulator& simulator) {
  if (!request.pins.precisions.empty()) return search_precisions(request, progress, simulator);
  // Unpinned precision: bf16, what large runs train in. While the engine refuses it, say so and
  // search fp32 rather than print nothing.
  SearchRequest bf16 = request;
  bf16.pins.precisions = {"bf16"};
  SearchResult result = search_precisions(bf16, progress, simulator);
  // Fall back only when the precision is what was refused: a refusal of the plainest layouts
  // (cp 1, no ZeRO), not of the cp or ZeRO the pins asked for.
  std::string reason;
  for (const auto& [why, layout] : result.refused_example)
    if (layout.cp == 1 && layout.zero == 0) reason = why;
  if (result.simulated > 0 || reason.empty()) return result;
  SearchRequest fp32 = request;
  fp32.pins.precisions = {"fp32"};
  SearchResult fallback = search_precisions(fp32, progress, simulator);
  fallback.notes.push_back(
      fmt::format("bf16 is refused by the engine ({}): searched fp32 instead", reason));
  fallback.wall_seconds += result.wall_seconds;
  return fallback;
}

}  // namespace mgpu::plan

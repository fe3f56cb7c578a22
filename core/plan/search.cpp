// The planner's search, top to bottom (see search.h for the idea):
//   1. enumerate the layouts the hybrid engine's rules allow, honouring the pins, and say what
//      would work when the pins leave none (enumerate.cpp);
//   2. the screen (screen.cpp): formula estimates that only decide which layouts get simulated;
//   3. simulate in screen order (one best layout per mesh first, so the table compares meshes),
//      skip what the engine refuses, reject what does not fit, rank the rest by tokens/s
//      (rank.cpp).
#include "core/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "core/parallel/hybrid.h"
#include "core/plan/search_internal.h"
#include "core/runtime/allocator.h"
#include "core/world/world.h"

namespace mgpu::plan {

using detail::is_v_schedule;
using detail::rank_simulated;
using detail::refine_best;
using detail::SimulationRuns;

// ---------------------------------------------------------------------------------- the search

namespace {

// The screen's verdict on every layout: over capacity when even its memory's lower bound is
// (screen.cpp: such a layout cannot fit), otherwise worth simulating; each side in estimated-time
// order.
struct Screened {
  std::vector<Candidate> fits, over;
};

Screened screen_all(const GPTConfig& model, const std::vector<Layout>& layouts,
                    const HardwareProfile& profile, double capacity) {
  Screened s;
  for (const Layout& l : layouts) {
    const Screen sc = screen_layout(model, l, profile);
    (static_cast<double>(sc.memory_bytes) > capacity ? s.over : s.fits).push_back({l, sc});
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
  // At most: the screen's first picks, the refinement and the probes (3x the first picks while
  // none fits can go past it).
  const int planned = 2 * r.max_simulated + std::min<int>(r.rejected_probes, screened.over.size());
  // Simulate in screen order until max_simulated ran; when none of them fits the capacity (the
  // screen's bound is below the peak), go on down the list, up to three times as many.
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
  refine_best(runs, screened.fits, r.max_simulated, planned);
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

// What the planner's search files share (search.cpp, enumerate.cpp, rank.cpp): one home for each
// helper more than one of them uses.
#pragma once
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/plan/search.h"

namespace mgpu::plan::detail {

// ZB-V and DualPipeV: two model chunks per stage in a V (enumerate.cpp).
bool is_v_schedule(const std::string& schedule);

// The screen's memory (screen_memory.cpp): a lower bound of the layout's simulated peak per rank,
// for `model` and its rank-local config `local` (the layout's dtype, recompute and T / cp).
double memory_at_least(const GPTConfig& model, const GPTConfig& local, const Layout& layout);

// Ranks what fits by tokens/s and says why each one is slower than the best; what does not fit
// is rejected with its excess (rank.cpp).
void rank_simulated(std::vector<Simulated>& simulated, const HardwareProfile& profile,
                    SearchResult& result);

// What the engine refuses depends on the options (cp > 1, ZeRO) and on the mesh (more stages
// than threads, stages that cannot be placed on nodes), never on how the batch is cut: one
// refusal covers every micro-batching of the same mesh and options.
inline auto refusal_key(const Layout& l) {
  return std::tuple(l.dp, l.tp, l.pp, l.cp, l.ep, l.zero, l.precision, l.schedule, l.recompute);
}

// Every knob of a layout: two layouts with the same key are the same run.
inline auto layout_key(const Layout& l) {
  return std::tuple(l.dp, l.tp, l.pp, l.cp, l.ep, l.microbatch_size, l.microbatches, l.schedule,
                    l.virtual_stages, l.zero, l.precision, l.recompute, l.sp,
                    l.vocab_parallel_head);
}

// Runs the simulator on layouts one at a time (simulation_runs.cpp), remembering what ran and
// what the engine refused: one refusal covers every layout with the same refusal_key, which is
// then not asked again.
class SimulationRuns {
 public:
  SimulationRuns(const SearchRequest& r, const Simulator& run, const Progress& progress,
                 double capacity, SearchResult& result)
      : r_(r), run_(run), progress_(progress), capacity_(capacity), result_(result) {}

  // True when `l` was simulated now (fitting or not); false when the engine refused it or it
  // already ran.
  bool simulate(const Layout& l, int planned);
  bool ran(const Layout& l) const { return ran_.contains(layout_key(l)); }
  // The fastest simulated layout that fits, or null.
  const Simulated* best() const;

  // Counts every enumerated layout the refusals met cover (layouts never reached are not
  // counted: the engine was not asked about them).
  void count_refusals(const std::vector<Layout>& layouts);

  std::vector<Simulated>& simulated() { return simulated_; }

 private:
  void refuse(const Layout& l, const std::string& reason);

  const SearchRequest& r_;
  const Simulator& run_;
  const Progress& progress_;
  double capacity_;
  SearchResult& result_;
  std::map<decltype(refusal_key(Layout{})), std::string> refusals_;
  std::set<decltype(layout_key(Layout{}))> ran_;
  std::vector<Simulated> simulated_;
};

// The screen only orders: from the fastest simulated layout that fits, simulate its neighbours
// (one knob moved, then two; refine.cpp) in screen order, move to the first that is faster, and
// go on until none is; each move may simulate up to `budget` layouts, 3 x `budget` in all.
void refine_best(SimulationRuns& runs, const std::vector<Candidate>& fits, int budget, int planned);

}  // namespace mgpu::plan::detail

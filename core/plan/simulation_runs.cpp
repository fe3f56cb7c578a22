// The search's simulations, one layout at a time (search_internal.h): what ran, what fits, and
// what the engine refused, each refusal asked once per refusal_key.
#include <exception>
#include <stdexcept>

#include "core/plan/search_internal.h"
#include "core/world/world.h"

namespace mgpu::plan::detail {

bool SimulationRuns::simulate(const Layout& l, int planned) {
  if (auto it = refusals_.find(refusal_key(l)); it != refusals_.end()) {
    ++result_.refused[it->second];
    return false;
  }
  if (!ran_.insert(layout_key(l)).second) return false;
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

const Simulated* SimulationRuns::best() const {
  const Simulated* best = nullptr;
  for (const Simulated& s : simulated_)
    if (s.fits && (!best || s.prediction.tokens_per_s > best->prediction.tokens_per_s)) best = &s;
  return best;
}

void SimulationRuns::count_refusals(const std::vector<Layout>& layouts) {
  result_.refused.clear();
  for (const Layout& l : layouts)
    if (auto it = refusals_.find(refusal_key(l)); it != refusals_.end())
      ++result_.refused[it->second];
}

void SimulationRuns::refuse(const Layout& l, const std::string& reason) {
  refusals_[refusal_key(l)] = reason;
  result_.refused_example.try_emplace(reason, l);
}

}  // namespace mgpu::plan::detail

// The search's last step: what fits ranked by tokens/s with why each one is slower than the best,
// what does not fit rejected with its excess.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/plan/search.h"
#include "core/plan/search_internal.h"

namespace mgpu::plan {

namespace {

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

namespace detail {

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

}  // namespace detail

}  // namespace mgpu::plan

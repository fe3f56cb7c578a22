#include "core/comm/cost_model.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace mgpu::comm {

namespace {
// The slowest neighbour-to-neighbour link of the ring 0 -> 1 -> ... -> N-1 -> 0.
double slowest_ring_step(int ranks, double bytes, const HardwareProfile& p) {
  double worst = 0;
  for (int r = 0; r < ranks; ++r)
    worst = std::max(worst, p.transfer_time(r, (r + 1) % ranks, bytes));
  return worst;
}

}  // namespace

double alpha_beta_time(const std::string& kind, int64_t elements, int elem_bytes, int ranks,
                       const HardwareProfile& profile) {
  if (ranks <= 1) return 0;
  double largest_chunk = static_cast<double>((elements + ranks - 1) / ranks) * elem_bytes;
  if (kind == "all_reduce")
    return 2.0 * (ranks - 1) * slowest_ring_step(ranks, largest_chunk, profile);
  if (kind == "reduce_scatter" || kind == "all_gather")
    return (ranks - 1) * slowest_ring_step(ranks, largest_chunk, profile);
  if (kind == "all_to_all") {
    // Pairwise exchange: in step s rank r sends one block to r+s and receives one from r-s; it
    // starts step s+1 when both are done. With one kind of link every step costs one message of
    // n/N bytes, (N-1)(alpha + (n/N) / beta); with mixed links the slow pairs delay their ranks.
    const double block = static_cast<double>(elements / ranks) * elem_bytes;
    std::vector<double> ready(static_cast<size_t>(ranks), 0.0), next(ready.size());
    for (int step = 1; step < ranks; ++step) {
      for (int r = 0; r < ranks; ++r) {
        const int to = (r + step) % ranks, from = (r - step + ranks) % ranks;
        next[r] = std::max(ready[r] + profile.transfer_time(r, to, block),
                           ready[from] + profile.transfer_time(from, r, block));
      }
      ready.swap(next);
    }
    return *std::max_element(ready.begin(), ready.end());
  }
  if (kind == "broadcast") {
    // Binomial tree from rank 0: in the round with distance `mask`, every rank v < mask that
    // holds the data sends it to v + mask. A sender's sends go one after another; a receiver can
    // forward once its copy has arrived. With one kind of link this is ceil(log2 N) messages.
    double bytes = static_cast<double>(elements) * elem_bytes;
    std::vector<double> ready(static_cast<size_t>(ranks), 0.0);
    for (int mask = 1; mask < ranks; mask <<= 1)
      for (int v = 0; v < mask && v + mask < ranks; ++v) {
        ready[v] += profile.transfer_time(v, v + mask, bytes);
        ready[v + mask] = ready[v];
      }
    return *std::max_element(ready.begin(), ready.end());
  }
  throw std::invalid_argument("alpha_beta_time: unknown collective '" + kind + "'");
}

}  // namespace mgpu::comm

#include "core/comm/cost_model.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace mgpu::comm {

double slowest_step(const std::vector<int>& members, int distance, double bytes,
                    const HardwareProfile& profile) {
  const int n = static_cast<int>(members.size());
  double worst = 0;
  for (int i = 0; i < n; ++i)
    worst = std::max(worst, profile.transfer_time(members[i], members[(i + distance) % n], bytes));
  return worst;
}

double tree_broadcast_time(const std::vector<int>& members, int root, double bytes,
                           const HardwareProfile& profile) {
  // Binomial tree, members numbered relative to the root (v = 0): in the round with distance
  // `mask`, every v < mask that holds the data sends it to v + mask. With one kind of link this
  // is ceil(log2 N) messages.
  const int n = static_cast<int>(members.size());
  auto world = [&](int v) { return members[(v + root) % n]; };
  std::vector<double> ready(static_cast<size_t>(n), 0.0);
  for (int mask = 1; mask < n; mask <<= 1)
    for (int v = 0; v < mask && v + mask < n; ++v) {
      ready[v] += profile.transfer_time(world(v), world(v + mask), bytes);
      ready[v + mask] = ready[v];
    }
  return n > 0 ? *std::max_element(ready.begin(), ready.end()) : 0.0;
}

namespace {
// The slowest neighbour-to-neighbour link of the ring 0 -> 1 -> ... -> N-1 -> 0.
double slowest_ring_step(int ranks, double bytes, const HardwareProfile& p) {
  std::vector<int> members(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) members[r] = r;
  return slowest_step(members, 1, bytes, p);
}

// Pairwise exchange: in step s rank r sends its block to r+s and receives one from r-s; it
// starts step s+1 when both are done. With mixed links the slow pairs delay their ranks. An
// empty block is no message.
template <class BlockBytes>
double pairwise_exchange_time(int ranks, BlockBytes bytes, const HardwareProfile& profile) {
  std::vector<double> ready(static_cast<size_t>(ranks), 0.0), next(ready.size());
  for (int step = 1; step < ranks; ++step) {
    for (int r = 0; r < ranks; ++r) {
      const int to = (r + step) % ranks, from = (r - step + ranks) % ranks;
      const double out = bytes(r, to), in = bytes(from, r);
      next[r] = std::max(out > 0 ? ready[r] + profile.transfer_time(r, to, out) : ready[r],
                         in > 0 ? ready[from] + profile.transfer_time(from, r, in) : 0.0);
    }
    ready.swap(next);
  }
  return *std::max_element(ready.begin(), ready.end());
}

}  // namespace

double all_to_all_v_time(const std::vector<int64_t>& counts, int elem_bytes, int ranks,
                         const HardwareProfile& profile) {
  if (static_cast<int64_t>(counts.size()) != int64_t{ranks} * ranks)
    throw std::invalid_argument("all_to_all_v_time: counts must be ranks x ranks");
  if (ranks <= 1) return 0;
  auto bytes = [&](int src, int dst) {
    return static_cast<double>(counts[static_cast<size_t>(src) * ranks + dst]) * elem_bytes;
  };
  return pairwise_exchange_time(ranks, bytes, profile);
}

double alpha_beta_time(const std::string& kind, int64_t elements, int elem_bytes, int ranks,
                       const HardwareProfile& profile) {
  if (ranks <= 1) return 0;
  double largest_chunk = static_cast<double>((elements + ranks - 1) / ranks) * elem_bytes;
  if (kind == "all_reduce")
    return 2.0 * (ranks - 1) * slowest_ring_step(ranks, largest_chunk, profile);
  if (kind == "reduce_scatter" || kind == "all_gather")
    return (ranks - 1) * slowest_ring_step(ranks, largest_chunk, profile);
  if (kind == "all_to_all" || kind == "all_to_all_v") {  // all_to_all_v: balanced counts
    // With one kind of link every step costs one message of n/N bytes: (N-1)(alpha + (n/N)/beta).
    const double block = static_cast<double>(elements / ranks) * elem_bytes;
    return pairwise_exchange_time(
        ranks, [block](int, int) { return block; }, profile);
  }
  if (kind == "broadcast") {
    std::vector<int> members(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) members[r] = r;
    return tree_broadcast_time(members, 0, static_cast<double>(elements) * elem_bytes, profile);
  }
  throw std::invalid_argument("alpha_beta_time: unknown collective '" + kind + "'");
}

}  // namespace mgpu::comm

#include "core/comm/cost_model.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/comm/comm.h"

namespace mgpu::comm {

namespace {

// The member whose message of `bytes` to member + distance takes longest (-1: no members).
int slowest_sender(const std::vector<int>& members, int distance, double bytes,
                   const HardwareProfile& profile) {
  const int n = static_cast<int>(members.size());
  int worst = -1;
  double worst_time = 0;
  for (int i = 0; i < n; ++i)
    if (const double t = profile.transfer_time(members[i], members[(i + distance) % n], bytes);
        worst < 0 || t > worst_time)
      worst = i, worst_time = t;
  return worst;
}

}  // namespace

double slowest_step(const std::vector<int>& members, int distance, double bytes,
                    const HardwareProfile& profile) {
  const int i = slowest_sender(members, distance, bytes, profile);
  if (i < 0) return 0;
  const int n = static_cast<int>(members.size());
  return profile.transfer_time(members[i], members[(i + distance) % n], bytes);
}

namespace {

// The binomial tree's ends, members numbered relative to the root (v = 0): in the round with
// distance `mask`, every v < mask that holds the data sends it to v + mask. A sender's sends go
// one after another; a receiver has the data (and may forward it) once its copy has arrived.
// `ready`: when each member (relative numbering) starts; a receiver's copy arrives when its
// sender's send ends, or when it gets there itself if later.
std::vector<double> tree_broadcast_ends(const std::vector<int>& members, int root, double bytes,
                                        const HardwareProfile& profile, std::vector<double> ready) {
  const int n = static_cast<int>(members.size());
  auto world = [&](int v) { return members[(v + root) % n]; };
  for (int mask = 1; mask < n; mask <<= 1)
    for (int v = 0; v < mask && v + mask < n; ++v) {
      ready[v] += profile.transfer_time(world(v), world(v + mask), bytes);
      ready[v + mask] = std::max(ready[v + mask], ready[v]);
    }
  return ready;
}

// Rounds of simultaneous exchanges, member i starting at ready[i]: in round s member i sends
// bytes(i, s) to member i + distance(s) and receives what member i - distance(s) sends it; its
// round ends when its send has left (the send keeps its comm lane busy) and the incoming message
// has arrived. `empty_is_message`: a ring step or a barrier signal sends even 0 bytes (latency);
// the pairwise all-to-all posts nothing for an empty block.
template <class Distance, class Bytes>
std::vector<double> exchange_rounds(const std::vector<int>& members, int rounds, Distance distance,
                                    Bytes bytes, bool empty_is_message,
                                    const HardwareProfile& profile, std::vector<double> ready) {
  std::vector<double> next(ready.size());
  const int n = static_cast<int>(members.size());
  for (int s = 0; s < rounds; ++s) {
    const int d = distance(s);
    for (int i = 0; i < n; ++i) {
      const int to = (i + d) % n, from = (i - d + n) % n;
      const double out = bytes(i, s), in = bytes(from, s);
      const double sent = out > 0 || empty_is_message
                              ? ready[i] + profile.transfer_time(members[i], members[to], out)
                              : ready[i];
      const double arrived =
          in > 0 || empty_is_message
              ? ready[from] + profile.transfer_time(members[from], members[i], in)
              : 0.0;
      next[i] = std::max(sent, arrived);
    }
    ready.swap(next);
  }
  return ready;
}

// Pairwise exchange (pairwise_all_to_all): in step s member r sends its block to r+s and
// receives one from r-s; an empty block is no message.
template <class BlockBytes>
std::vector<double> pairwise_exchange_ends(const std::vector<int>& members, BlockBytes bytes,
                                           const HardwareProfile& profile,
                                           std::vector<double> starts) {
  const int n = static_cast<int>(members.size());
  auto distance = [](int s) { return s + 1; };
  auto step_bytes = [&](int i, int s) { return bytes(i, (i + s + 1) % n); };
  return exchange_rounds(members, n - 1, distance, step_bytes, false, profile, std::move(starts));
}

std::vector<double> zeros(size_t n) {
  return std::vector<double>(n, 0.0);
}

std::vector<int> first_ranks(int ranks) {
  std::vector<int> members(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) members[r] = r;
  return members;
}

double latest(const std::vector<double>& ends) {
  return ends.empty() ? 0.0 : *std::max_element(ends.begin(), ends.end());
}

// The slowest neighbour-to-neighbour link of the ring 0 -> 1 -> ... -> N-1 -> 0.
double slowest_ring_step(int ranks, double bytes, const HardwareProfile& p) {
  return slowest_step(first_ranks(ranks), 1, bytes, p);
}

}  // namespace

const LinkSpec& slowest_ring_link(int ranks, double bytes, const HardwareProfile& profile) {
  if (ranks < 2) return profile.intra_node;  // no message leaves the rank
  const int r = slowest_sender(first_ranks(ranks), 1, bytes, profile);
  return profile.link(r, (r + 1) % ranks);
}

double tree_broadcast_time(const std::vector<int>& members, int root, double bytes,
                           const HardwareProfile& profile) {
  return latest(tree_broadcast_ends(members, root, bytes, profile, zeros(members.size())));
}

double all_to_all_v_time(const std::vector<int64_t>& counts, int elem_bytes, int ranks,
                         const HardwareProfile& profile) {
  if (static_cast<int64_t>(counts.size()) != int64_t{ranks} * ranks)
    throw std::invalid_argument("all_to_all_v_time: counts must be ranks x ranks");
  if (ranks <= 1) return 0;
  auto bytes = [&](int src, int dst) {
    return static_cast<double>(counts[static_cast<size_t>(src) * ranks + dst]) * elem_bytes;
  };
  return latest(pairwise_exchange_ends(first_ranks(ranks), bytes, profile, zeros(ranks)));
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
    return latest(pairwise_exchange_ends(
        first_ranks(ranks), [block](int, int) { return block; }, profile, zeros(ranks)));
  }
  if (kind == "broadcast")
    return tree_broadcast_time(first_ranks(ranks), 0, static_cast<double>(elements) * elem_bytes,
                               profile);
  throw std::invalid_argument("alpha_beta_time: unknown collective '" + kind + "'");
}

std::vector<double> member_end_times(const std::string& kind, const std::vector<int>& members,
                                     int64_t elements, int elem_bytes, int root,
                                     const HardwareProfile& profile,
                                     std::span<const double> starts) {
  const int n = static_cast<int>(members.size());
  if (!starts.empty() && static_cast<int>(starts.size()) != n)
    throw std::invalid_argument("member_end_times: one start per member");
  const std::vector<double> start =
      starts.empty() ? zeros(members.size()) : std::vector<double>(starts.begin(), starts.end());
  // Ring chunk `index` (taken modulo n, as ring_chunk does) in bytes.
  auto chunk = [&](int index) {
    const auto [begin, end] = chunk_range(elements, n, ((index % n) + n) % n);
    return static_cast<double>(end - begin) * elem_bytes;
  };
  auto ring = [&](int rounds, auto sent_chunk) {
    return exchange_rounds(
        members, rounds, [](int) { return 1; },
        [&](int i, int s) { return chunk(sent_chunk(i, s)); }, true, profile, start);
  };
  // The chunk each algorithm's step s sends from member i (the loops of algorithms/ and the
  // reference ring all-reduce).
  auto reduce_scatter_chunk = [](int i, int s) { return i - s - 1; };
  auto all_gather_chunk = [](int i, int s) { return i - s; };
  if (n <= 1) return start;
  if (kind == "all_reduce")
    return ring(2 * (n - 1), [&](int i, int s) {
      return s < n - 1 ? reduce_scatter_chunk(i, s) : all_gather_chunk(i, s - (n - 1));
    });
  if (kind == "reduce_scatter") return ring(n - 1, reduce_scatter_chunk);
  if (kind == "all_gather") return ring(n - 1, all_gather_chunk);
  if (kind == "all_to_all") {
    const double block = static_cast<double>(elements / n) * elem_bytes;
    return pairwise_exchange_ends(
        members, [block](int, int) { return block; }, profile, start);
  }
  if (kind == "broadcast") {
    std::vector<double> relative_start(start.size());
    for (int v = 0; v < n; ++v) relative_start[v] = start[(v + root) % n];
    const std::vector<double> relative = tree_broadcast_ends(
        members, root, static_cast<double>(elements) * elem_bytes, profile, relative_start);
    std::vector<double> ends(relative.size());
    for (int v = 0; v < n; ++v) ends[(v + root) % n] = relative[v];
    return ends;
  }
  if (kind == "barrier") {  // dissemination: round k signals 2^k ranks ahead
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    return exchange_rounds(
        members, rounds, [](int s) { return 1 << s; }, [](int, int) { return 0.0; }, true, profile,
        start);
  }
  throw std::invalid_argument("member_end_times: unknown collective '" + kind + "'");
}

double all_to_all_v_member_time(const std::vector<int>& members, int rank,
                                std::span<const int64_t> send_counts,
                                std::span<const int64_t> recv_counts, int elem_bytes,
                                const HardwareProfile& profile) {
  const int n = static_cast<int>(members.size());
  double ready = 0;
  for (int s = 1; s < n; ++s) {
    const int to = (rank + s) % n, from = (rank - s + n) % n;
    const double out = static_cast<double>(send_counts[to]) * elem_bytes;
    const double in = static_cast<double>(recv_counts[from]) * elem_bytes;
    const double sent =
        out > 0 ? ready + profile.transfer_time(members[rank], members[to], out) : ready;
    const double arrived =
        in > 0 ? ready + profile.transfer_time(members[from], members[rank], in) : 0.0;
    ready = std::max(sent, arrived);
  }
  return ready;
}

}  // namespace mgpu::comm

// Closed forms of the collectives: the bytes one rank puts on the wire and the alpha-beta time of
// each algorithm, as multiples of the buffer. Every lesson, the planner's screen and the trace
// analysis print or rank with these; the measured figures come from the trace beside them.
//
// Ring algorithms (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations", JPDC 69(2), 2009): a reduce-scatter or an all-gather of an n-rank group takes
// n-1 steps, each rank sending one 1/n chunk per step, so (n-1)/n of the buffer; an all-reduce is
// a reduce-scatter then an all-gather, 2(n-1)/n. Time in the alpha-beta model (Thakur,
// Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH", IJHPCA
// 19(1), 2005): 2(n-1) alpha + 2(n-1)/n x bytes / bandwidth for the ring all-reduce.
#pragma once
#include <cstdint>
#include <span>

namespace mgpu::theory {

// Share of the buffer each rank sends in a ring all-reduce: 2(n-1)/n (0 for one rank).
inline double ring_all_reduce_factor(double n) {
  return 2 * (n - 1) / n;
}

// Share of the (whole, unsharded) buffer each rank sends in a ring reduce-scatter, all-gather or
// all-to-all: (n-1)/n.
inline double ring_shard_factor(double n) {
  return (n - 1) / n;
}

// Seconds of a ring all-reduce of `bytes` over `n` ranks whose slowest hop has `bandwidth` (B/s)
// and `latency` (s): 2(n-1)/n x bytes / bandwidth + 2(n-1) alpha.
inline double ring_all_reduce_seconds(double bytes, int n, double bandwidth, double latency) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / bandwidth + 2.0 * (n - 1) * latency;
}

// The same shares in whole bytes, as the collectives lesson prints them beside the trace: the
// busiest rank of a ring all-reduce of `bytes` sends 2(n-1) x bytes / n, of a reduce-scatter,
// all-gather or all-to-all (n-1) x bytes / n (rounded down).
inline int64_t ring_all_reduce_sent_bytes(int64_t bytes, int n) {
  return 2 * (n - 1) * bytes / n;
}
inline int64_t ring_shard_sent_bytes(int64_t bytes, int n) {
  return (n - 1) * bytes / n;
}

// The root of a binomial-tree broadcast sends the whole buffer once per round, ceil(log2 n)
// rounds (Thakur et al. 2005, section 4.1).
inline int64_t binomial_broadcast_root_bytes(int64_t bytes, int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds * bytes;
}

// ---- mixture of experts: the dispatch all-to-all ----
// In one MoE layer's dispatch a rank sends each kept (token, choice) row of C values to the rank
// holding its expert; rows for its own experts stay (GShard, Lepikhin et al. 2020, section 2.2;
// Megatron-Core's token dispatcher). The combine sends the same rows back, so it moves as much.

// Bytes this rank sends in one dispatch: send_counts[j] rows (its routing's kept slots bound for
// rank j's experts) of `width` values of `dtype_size` bytes, for every j but `rank`.
inline int64_t moe_dispatch_sent_bytes(std::span<const int64_t> send_counts, int rank,
                                       int64_t width, int dtype_size) {
  int64_t rows = 0;
  for (size_t j = 0; j < send_counts.size(); ++j)
    if (static_cast<int>(j) != rank) rows += send_counts[j];
  return rows * width * dtype_size;
}

// The same under balanced routing (every expert chosen equally often, nothing dropped): of a
// rank's tokens x top_k rows, the (ep-1)/ep bound for the other ranks' experts leave it:
// tokens * top_k * width * dtype_size * (ep-1)/ep, rounded down.
inline int64_t moe_dispatch_sent_bytes_balanced(int64_t tokens, int top_k, int64_t width,
                                                int dtype_size, int ep) {
  return tokens * top_k * width * dtype_size * (ep - 1) / ep;
}

}  // namespace mgpu::theory

// Closed forms of expert parallelism: what one MoE layer's routing puts on each rank and on the
// wire, and what each rank stores. The expert_parallel lesson prints them beside the trace's and
// the allocator's figures.
//
// Rank j of an ep group holds experts [j*E/ep, (j+1)*E/ep) (GShard, Lepikhin et al. 2020,
// section 2.2; Switch Transformer, Fedus et al. 2021, section 2.2). A rank's kept (token, choice)
// slots bound for another rank's experts leave it in the dispatch all-to-all, and the experts'
// outputs for another rank's tokens leave it in the combine; the backward pass sends the same
// rows' gradients the other way. Per-expert counts are [experts] vectors in expert order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace mgpu::theory {

// The load every expert would get from a perfect router: tokens x top_k / experts slots.
inline double balanced_expert_load(int64_t tokens, int top_k, int experts) {
  return static_cast<double>(tokens) * top_k / experts;
}

// The router's imbalance: the busiest expert's load over the mean load (1 = balanced; E when one
// expert takes every slot).
inline double load_imbalance(std::span<const int64_t> load) {
  if (load.empty()) return 1.0;
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  if (total <= 0) return 1.0;
  return static_cast<double>(*std::max_element(load.begin(), load.end())) * load.size() / total;
}

// Slots an expert keeps on one rank at most: `capacity` per group (core/model/moe.h's
// expert_capacity) times the rank's groups (sequences); unbounded (-1) when dropless.
inline int64_t max_kept_per_expert(int64_t capacity, int64_t groups) {
  return capacity > 0 ? capacity * groups : -1;
}

// A routing's kept slots per expert, summed per ep rank holding them: the dispatch's send counts
// in rows (core/theory/collectives.h's moe_dispatch_sent_bytes prices them).
inline std::vector<int64_t> rows_per_rank(std::span<const int64_t> tokens_per_expert, int ep) {
  std::vector<int64_t> rows(static_cast<size_t>(ep), 0);
  const size_t local = tokens_per_expert.size() / static_cast<size_t>(ep);
  for (size_t e = 0; e < tokens_per_expert.size(); ++e) rows[e / local] += tokens_per_expert[e];
  return rows;
}

// Rows rank `rank` sends back in the combine: what every other rank of its ep group dispatched
// to its experts. `tokens_per_expert[s]`: ep rank s's kept slots per expert.
inline int64_t combine_rows_sent(const std::vector<std::vector<int64_t>>& tokens_per_expert,
                                 int rank) {
  const int ep = static_cast<int>(tokens_per_expert.size());
  int64_t rows = 0;
  for (int s = 0; s < ep; ++s) {
    if (s == rank) continue;
    const auto& counts = tokens_per_expert[static_cast<size_t>(s)];
    const int64_t local = static_cast<int64_t>(counts.size()) / ep;
    for (int64_t e = rank * local; e < (rank + 1) * local; ++e)
      rows += counts[static_cast<size_t>(e)];
  }
  return rows;
}

// Rows a rank's experts compute: every ep rank's slots for them, its own included.
inline int64_t expert_rows_computed(const std::vector<std::vector<int64_t>>& tokens_per_expert,
                                    int rank) {
  const int ep = static_cast<int>(tokens_per_expert.size());
  int64_t rows = 0;
  for (const auto& counts : tokens_per_expert) {
    const int64_t local = static_cast<int64_t>(counts.size()) / ep;
    for (int64_t e = rank * local; e < (rank + 1) * local; ++e)
      rows += counts[static_cast<size_t>(e)];
  }
  return rows;
}

// Bytes one rank sends for one MoE layer in a training step: its dispatch and its combine in
// each forward pass (`forward_passes`: 2 under full activation recompute, whose backward re-runs
// the block's forward and its exchanges, as Megatron-LM's recompute does), and their gradients
// once backward (combine's backward moves dispatch's rows, dispatch's backward combine's).
inline int64_t exchange_bytes_per_layer(int64_t dispatch_bytes, int64_t combine_bytes,
                                        int forward_passes = 1) {
  return (forward_passes + 1) * (dispatch_bytes + combine_bytes);
}

// Parameters one rank stores under expert parallelism: the dense part replicated, the experts'
// at 1/ep (each MoE layer's E experts split over the ep ranks).
inline int64_t params_per_rank(int64_t dense_params, int64_t expert_params, int ep) {
  return dense_params + expert_params / ep;
}

}  // namespace mgpu::theory

// The rules of a mixture of experts that every part shares (core/model/moe.h): the capacity, the
// routing of phantom tensors (no values to route on) and the exchange plan's sums.
#include <cmath>
#include <numeric>

#include "core/model/moe.h"

namespace mgpu {

int64_t expert_capacity(double capacity_factor, int64_t group_tokens, int top_k, int experts) {
  if (capacity_factor == 0.0) return 0;
  return static_cast<int64_t>(
      std::ceil(capacity_factor * double(group_tokens) * top_k / double(experts)));
}

// Round-robin choices (slot s goes to expert s % E, so a token's k choices are distinct), the
// capacity kept in (choice, token) order per group, then the dispatch order by expert and slot.
Routing balanced_routing(const RouteQuery& query) {
  const int k = query.top_k, experts = query.experts;
  const int64_t slots = query.tokens * k;
  Routing r;
  r.expert.resize(size_t(slots));
  r.weight.assign(size_t(slots), 1.0f / float(k));
  r.position.assign(size_t(slots), -1);
  r.tokens_per_expert.assign(size_t(experts), 0);
  for (int64_t s = 0; s < slots; ++s) r.expert[size_t(s)] = int32_t(s % experts);
  std::vector<char> kept(size_t(slots), 0);
  for (int64_t g0 = 0; g0 < query.tokens; g0 += query.group_tokens) {
    std::vector<int64_t> load(size_t(experts), 0);
    for (int c = 0; c < k; ++c)
      for (int64_t t = g0; t < g0 + query.group_tokens; ++t) {
        const int64_t s = t * k + c;
        int64_t& n = load[size_t(r.expert[size_t(s)])];
        if (query.capacity > 0 && n >= query.capacity) {
          r.dropped++;
          continue;
        }
        n++;
        kept[size_t(s)] = 1;
      }
  }
  for (int64_t s = 0; s < slots; ++s)
    if (kept[size_t(s)]) r.tokens_per_expert[size_t(r.expert[size_t(s)])]++;
  // Dispatch order: a counting sort by expert, slots ascending within each.
  std::vector<int64_t> next(size_t(experts), 0);
  std::exclusive_scan(r.tokens_per_expert.begin(), r.tokens_per_expert.end(), next.begin(),
                      int64_t{0});
  r.order.resize(size_t(slots - r.dropped));
  for (int64_t s = 0; s < slots; ++s)
    if (kept[size_t(s)]) {
      const int64_t row = next[size_t(r.expert[size_t(s)])]++;
      r.order[size_t(row)] = int32_t(s);
      r.position[size_t(s)] = int32_t(row);
    }
  r.send_counts.assign(size_t(query.ranks), 0);
  const int per_rank = experts / query.ranks;
  for (int e = 0; e < experts; ++e)
    r.send_counts[size_t(e / per_rank)] += r.tokens_per_expert[size_t(e)];
  return r;
}

namespace {
// Slots of each group that chose each expert (before capacity): [groups][experts].
std::vector<int64_t> choices_per_group(const Routing& routing, int64_t group_tokens, int experts,
                                       int top_k) {
  const int64_t group_slots = group_tokens * top_k;
  const int64_t groups = int64_t(routing.expert.size()) / group_slots;
  std::vector<int64_t> counts(size_t(groups * experts), 0);
  for (size_t s = 0; s < routing.expert.size(); ++s)
    counts[size_t(int64_t(s) / group_slots * experts + routing.expert[s])]++;
  return counts;
}
}  // namespace

float moe_aux_loss(std::span<const float> probs, const Routing& routing, int64_t group_tokens,
                   int experts, int top_k, float coef) {
  const std::vector<int64_t> counts = choices_per_group(routing, group_tokens, experts, top_k);
  const int64_t groups = int64_t(counts.size()) / experts;
  double total = 0.0;
  for (int64_t g = 0; g < groups; ++g) {
    double sum = 0.0;  // sum_e f_e * P_e
    for (int e = 0; e < experts; ++e) {
      double p_mean = 0.0;
      for (int64_t t = g * group_tokens; t < (g + 1) * group_tokens; ++t)
        p_mean += probs[size_t(t * experts + e)];
      p_mean /= double(group_tokens);
      const double f = double(counts[size_t(g * experts + e)]) / double(group_tokens * top_k);
      sum += f * p_mean;
    }
    total += experts * sum;
  }
  return float(coef * total / double(groups));
}

void moe_aux_loss_grad(std::span<float> d_probs, const Routing& routing, int64_t group_tokens,
                       int experts, int top_k, float scale) {
  const std::vector<int64_t> counts = choices_per_group(routing, group_tokens, experts, top_k);
  const int64_t groups = int64_t(counts.size()) / experts;
  for (int64_t g = 0; g < groups; ++g)
    for (int e = 0; e < experts; ++e) {
      const double f = double(counts[size_t(g * experts + e)]) / double(group_tokens * top_k);
      const float d = float(scale * experts * f / double(group_tokens * groups));
      for (int64_t t = g * group_tokens; t < (g + 1) * group_tokens; ++t)
        d_probs[size_t(t * experts + e)] += d;
    }
}

int64_t ExchangePlan::sent_rows() const {
  return std::accumulate(send.begin(), send.end(), int64_t{0});
}

int64_t ExchangePlan::received_rows() const {
  return std::accumulate(recv.begin(), recv.end(), int64_t{0});
}

std::vector<int64_t> ExchangePlan::rows_per_local_expert() const {
  std::vector<int64_t> rows(size_t(local_experts), 0);
  for (int s = 0; s < ranks; ++s)
    for (int e = 0; e < local_experts; ++e) rows[size_t(e)] += recv[size_t(s * local_experts + e)];
  return rows;
}

}  // namespace mgpu

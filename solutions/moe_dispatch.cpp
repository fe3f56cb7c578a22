// Exercise 09, the reference: top-k routing with capacity, the dispatch order and the send
// counts of a mixture-of-experts layer (the contract in core/model/moe.h).
#include <algorithm>
#include <numeric>

#include "exercises/exercises.h"

namespace mgpu::reference {

namespace {
// A token's top-k experts by probability, the lower expert first on a tie, with the weights
// renormalised over the k (GShard, Mixtral).
void choose_top_k(const RouteQuery& q, int64_t token, Routing& r) {
  std::vector<int32_t> experts(size_t(q.experts));
  std::iota(experts.begin(), experts.end(), 0);
  const float* p = q.probs.data() + token * q.experts;
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  float sum = 0.0f;
  for (int c = 0; c < q.top_k; ++c) sum += p[experts[size_t(c)]];
  for (int c = 0; c < q.top_k; ++c) {
    const size_t slot = size_t(token * q.top_k + c);
    r.expert[slot] = experts[size_t(c)];
    r.weight[slot] = p[experts[size_t(c)]] / sum;
  }
}

// Per group: slots in (choice, token) order, each kept while its expert has room.
std::vector<char> apply_capacity(const RouteQuery& q, Routing& r) {
  std::vector<char> kept(r.expert.size(), 0);
  for (int64_t first = 0; first < q.tokens; first += q.group_tokens) {
    std::vector<int64_t> load(size_t(q.experts), 0);
    for (int c = 0; c < q.top_k; ++c)
      for (int64_t t = first; t < first + q.group_tokens; ++t) {
        const size_t slot = size_t(t * q.top_k + c);
        int64_t& n = load[size_t(r.expert[slot])];
        if (q.capacity > 0 && n >= q.capacity) {
          r.dropped++;
        } else {
          n++;
          kept[slot] = 1;
        }
      }
  }
  return kept;
}
}  // namespace

Routing route_tokens(const RouteQuery& q) {
  const size_t slots = size_t(q.tokens * q.top_k);
  Routing r;
  r.expert.resize(slots);
  r.weight.resize(slots);
  r.position.assign(slots, -1);
  for (int64_t t = 0; t < q.tokens; ++t) choose_top_k(q, t, r);
  const std::vector<char> kept = apply_capacity(q, r);
  // Dispatch order: by expert, then by slot.
  r.tokens_per_expert.assign(size_t(q.experts), 0);
  for (int e = 0; e < q.experts; ++e)
    for (size_t s = 0; s < slots; ++s)
      if (kept[s] && r.expert[s] == e) {
        r.position[s] = int32_t(r.order.size());
        r.order.push_back(int32_t(s));
        r.tokens_per_expert[size_t(e)]++;
      }
  r.send_counts.assign(size_t(q.ranks), 0);
  for (int e = 0; e < q.experts; ++e)
    r.send_counts[size_t(e / (q.experts / q.ranks))] += r.tokens_per_expert[size_t(e)];
  return r;
}

}  // namespace mgpu::reference

// Exercise 09: the dispatch of a mixture-of-experts layer. Replace the body with your
// implementation (see docs/exercises/09-moe-dispatch.md), then run
// `mgpu run expert_parallel --impl mine`: your routing decides where every token of every MoE
// layer goes, what is dropped, and what each rank sends in the all-to-all.
//
// The task, in the order the fields of Routing are filled (slot = token * top_k + choice):
//   1. per token: its top_k experts by probability, highest first; equal probabilities go to the
//      lower expert first. expert[slot] = that expert; weight[slot] = its probability divided by
//      the sum of the token's top_k probabilities (dropped slots keep their weight too).
//   2. per group of group_tokens consecutive tokens (capacity != 0): each expert keeps at most
//      `capacity` slots, offered in (choice, token) order: every token's first choice, in token
//      order, before any token's second choice. A slot over capacity is dropped. capacity == 0 is
//      dropless: every slot is kept.
//   3. order: the kept slots sorted by expert, then by slot (over all groups); position[slot] =
//      its index in order, or -1 when dropped.
//   4. tokens_per_expert[e] = kept slots of expert e; send_counts[j] = kept slots of the experts
//      rank j holds, [j * E / ranks, (j + 1) * E / ranks); dropped = the slots over capacity.
#include <algorithm>  // std::stable_sort

#include "exercises/exercises.h"

namespace mgpu::mine {

Routing route_tokens(const RouteQuery& query) {
  (void)query;
  // TODO: top-k with ties to the lower expert, renormalised weights, capacity per group in
  // (choice, token) order, then order/position, tokens_per_expert, send_counts and dropped
  throw ex::NotImplemented("not implemented yet: see docs/exercises/09-moe-dispatch.md");
}

}  // namespace mgpu::mine

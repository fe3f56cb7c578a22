// Graded: exercise 09, the mixture-of-experts dispatch (docs/exercises/09-moe-dispatch.md). The
// selected routing function is called on small hand-made router outputs whose answers are
// worked out in the comments: the top-k choices and their ties, the renormalised weights, which
// slots an expert keeps at its capacity (per group, by choice then token), the dispatch order and
// each slot's row in it, the send counts for 2 and 4 expert-parallel ranks, and dropless routing.
#include <catch2/catch.hpp>

#include <vector>

#include "core/model/moe.h"
#include "exercises/selection.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {

// The router's probabilities and the routing the selected implementation makes of them.
Routing route(const std::vector<float>& probs, int experts, int top_k, int64_t group_tokens,
              int64_t capacity, int ranks = 1) {
  RouteQuery q;
  q.probs = probs;
  q.tokens = static_cast<int64_t>(probs.size()) / experts;
  q.group_tokens = group_tokens;
  q.experts = experts;
  q.top_k = top_k;
  q.capacity = capacity;
  q.ranks = ranks;
  return ex::selected_seams().moe.route(q);
}

// Three tokens over 4 experts, top-2, dropless:
//   token 0  0.1 0.4 0.4 0.1   experts 1, 2 (a tie: the lower expert first), weights 0.5, 0.5
//   token 1  0.25 x 4          experts 0, 1 (all tied), weights 0.5, 0.5
//   token 2  0.5 0.1 0.1 0.3   experts 0, 3, weights 0.5/0.8 = 0.625, 0.3/0.8 = 0.375
const std::vector<float> kThreeTokens = {0.1f,  0.4f,  0.4f, 0.1f, 0.25f, 0.25f,
                                         0.25f, 0.25f, 0.5f, 0.1f, 0.1f,  0.3f};

// Two groups of 3 tokens over 2 experts, top-2, capacity 2 per expert per group. In each group:
//   token 0  0.7 0.3   choices 0, 1
//   token 1  0.6 0.4   choices 0, 1
//   token 2  0.2 0.8   choices 1, 0
// First choices first, in token order: expert 0 keeps tokens 0 and 1, expert 1 token 2. Then
// second choices: token 0's (expert 1) is kept, token 1's (expert 1, full) and token 2's (expert
// 0, full) are dropped. (Token order alone would drop token 2's first choice instead.) Slots are
// token * 2 + choice; kept: 0 1 2 4 and, in the second group, 6 7 8 10.
const std::vector<float> kTwoGroups = {0.7f, 0.3f, 0.6f, 0.4f, 0.2f, 0.8f,
                                       0.7f, 0.3f, 0.6f, 0.4f, 0.2f, 0.8f};

}  // namespace

TEST_CASE("ex09 top-k experts in descending probability with ties to the lower expert (2 pts)",
          "[grade][ex09]") {
  const Routing r = route(kThreeTokens, 4, 2, 3, 0);
  CHECK(r.expert == std::vector<int32_t>{1, 2, 0, 1, 0, 3});
  // top-1 and top-3 of three experts: [0.2 0.5 0.3] and [0.4 0.2 0.4]
  const std::vector<float> probs = {0.2f, 0.5f, 0.3f, 0.4f, 0.2f, 0.4f};
  CHECK(route(probs, 3, 1, 2, 0).expert == std::vector<int32_t>{1, 0});
  CHECK(route(probs, 3, 3, 2, 0).expert == std::vector<int32_t>{1, 2, 0, 0, 2, 1});
}

TEST_CASE("ex09 weights renormalised over each token's top-k (1 pts)", "[grade][ex09]") {
  const Routing r = route(kThreeTokens, 4, 2, 3, 0);
  REQUIRE(r.weight.size() == 6);
  const std::vector<float> expected = {0.5f, 0.5f, 0.5f, 0.5f, 0.625f, 0.375f};
  for (size_t i = 0; i < expected.size(); ++i) CHECK(r.weight[i] == Approx(expected[i]));
  // top-1: every weight is 1; dropped slots keep their weights too (0.6/1.0 and 0.8/1.0 ...)
  for (float w : route(kThreeTokens, 4, 1, 3, 0).weight) CHECK(w == Approx(1.0f));
  const Routing capped = route(kTwoGroups, 2, 2, 3, 2);
  REQUIRE(capped.weight.size() == 12);
  CHECK(capped.weight[3] == Approx(0.4f));  // token 1's dropped second choice
  CHECK(capped.weight[5] == Approx(0.2f));  // token 2's dropped second choice
}

TEST_CASE("ex09 capacity keeps slots by choice then token in each group (2 pts)", "[grade][ex09]") {
  const Routing r = route(kTwoGroups, 2, 2, 3, 2);
  CHECK(r.dropped == 4);
  CHECK(r.tokens_per_expert == std::vector<int64_t>{4, 4});
  std::vector<int32_t> kept;
  for (size_t slot = 0; slot < r.position.size(); ++slot)
    if (r.position[slot] >= 0) kept.push_back(static_cast<int32_t>(slot));
  CHECK(kept == std::vector<int32_t>{0, 1, 2, 4, 6, 7, 8, 10});
  // the capacity is per group: one group of all six tokens keeps only 2 + 2 slots
  const Routing one_group = route(kTwoGroups, 2, 2, 6, 2);
  CHECK(one_group.dropped == 8);
  CHECK(one_group.tokens_per_expert == std::vector<int64_t>{2, 2});
}

TEST_CASE("ex09 dispatch order by expert then slot and each slot's position (2 pts)",
          "[grade][ex09]") {
  // dropless: expert 0 gets slots 2 4, expert 1 slots 0 3, expert 2 slot 1, expert 3 slot 5
  const Routing r = route(kThreeTokens, 4, 2, 3, 0);
  CHECK(r.order == std::vector<int32_t>{2, 4, 0, 3, 1, 5});
  CHECK(r.position == std::vector<int32_t>{2, 4, 0, 3, 1, 5});
  // with drops: expert 0 keeps 0 2 6 8, expert 1 keeps 1 4 7 10; dropped slots are at -1
  const Routing capped = route(kTwoGroups, 2, 2, 3, 2);
  CHECK(capped.order == std::vector<int32_t>{0, 2, 6, 8, 1, 4, 7, 10});
  CHECK(capped.position == std::vector<int32_t>{0, 4, 1, -1, 5, -1, 2, 6, 3, -1, 7, -1});
}

TEST_CASE("ex09 send counts per expert-parallel rank for 2 and 4 ranks (2 pts)", "[grade][ex09]") {
  // experts 0..3 got 2 2 1 1 slots: two ranks hold experts {0,1} {2,3}; four ranks one each
  CHECK(route(kThreeTokens, 4, 2, 3, 0, 2).send_counts == std::vector<int64_t>{4, 2});
  CHECK(route(kThreeTokens, 4, 2, 3, 0, 4).send_counts == std::vector<int64_t>{2, 2, 1, 1});
  // 8 experts, top-1, argmax 7 0 3 3 5 1 6 2 over 4 ranks of 2 experts: 2 3 1 2
  std::vector<float> probs(8 * 8, 0.05f);
  const int argmax[8] = {7, 0, 3, 3, 5, 1, 6, 2};
  for (int t = 0; t < 8; ++t) probs[t * 8 + argmax[t]] = 0.65f;
  CHECK(route(probs, 8, 1, 8, 0, 4).send_counts == std::vector<int64_t>{2, 3, 1, 2});
  // dropped slots are not sent
  CHECK(route(kTwoGroups, 2, 2, 3, 2, 2).send_counts == std::vector<int64_t>{4, 4});
}

TEST_CASE("ex09 dropless routing keeps every slot however skewed (1 pts)", "[grade][ex09]") {
  // five tokens that all prefer expert 1: capacity 0 keeps all five, capacity 2 only two
  const std::vector<float> skewed = {0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.7f, 0.4f, 0.6f, 0.1f, 0.9f};
  const Routing dropless = route(skewed, 2, 1, 5, 0);
  CHECK(dropless.dropped == 0);
  CHECK(dropless.tokens_per_expert == std::vector<int64_t>{0, 5});
  CHECK(dropless.order == std::vector<int32_t>{0, 1, 2, 3, 4});
  const Routing capped = route(skewed, 2, 1, 5, 2);
  CHECK(capped.dropped == 3);
  CHECK(capped.position == std::vector<int32_t>{0, 1, -1, -1, -1});
}

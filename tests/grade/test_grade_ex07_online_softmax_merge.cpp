// Graded: exercise 07, the online-softmax merge (docs/exercises/07-online-softmax-merge.md). The
// installed merge combines partial attention results (ops::attention_block_forward over blocks
// of keys) and is compared with attention over all keys at once; edge cases: parts that saw no
// key, scores large enough to overflow a naive exp. The bonus checks the merge's backward against
// finite differences of the merge itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/ops.h"
#include "core/parallel/context_parallel.h"
#include "exercises/selection.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {
constexpr int64_t B = 2, T = 8, C = 8, H = 2;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> values(int64_t n, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + phase);
  return v;
}

std::vector<int32_t> range(int begin, int end) {
  std::vector<int32_t> r;
  for (int i = begin; i < end; ++i) r.push_back(i);
  return r;
}

struct Partial {
  Tensor out, lse;
};

// Attention of all T queries against the keys at `keys` (causal by position).
Partial block(const Tensor& q, const Tensor& kv, const std::vector<int32_t>& keys) {
  const std::vector<int32_t> queries = range(0, T);
  const int64_t n = int64_t(keys.size());
  Tensor kv_block = Tensor::zeros({B, n, 2 * C}, MemCategory::workspace);
  Tensor rows = kv_block.reshape({B, n * 2 * C});  // the keys' rows of every sequence
  ops::copy_columns(rows, 0, kv.reshape({B, T * 2 * C}), keys.front() * 2 * C, n * 2 * C);
  Partial p{Tensor::zeros({B, T, C}, MemCategory::workspace),
            Tensor::zeros({B, H, T}, MemCategory::workspace)};
  Tensor scores = Tensor::zeros({B, H, T, T}, MemCategory::workspace);
  ops::attention_block_forward(p.out, p.lse, scores, q, kv_block, queries, keys, int(H));
  return p;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                 const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isinf(want[i]))
      REQUIRE(got[i] == want[i]);
    else
      REQUIRE(got[i] == Approx(want[i]).margin(tol));
  }
}

// Queries and keys/values for the ring-style checks, scaled so scores are far from zero.
struct Inputs {
  Tensor q = Tensor::from({B, T, C}, values(B* T* C, 1.5f, 0.1f));
  Tensor kv = Tensor::from({B, T, 2 * C}, values(B* T * 2 * C, 1.5f, 0.7f));
};

// Merges the key blocks [0,2) [2,4) [4,6) [6,8) into a running result with the installed merge,
// in `order`, and compares with attention over all keys in one block.
void merge_blocks_in_order(const std::vector<int>& order) {
  Inputs in;
  const Partial whole = block(in.q, in.kv, range(0, T));
  Partial running = block(in.q, in.kv, range(2 * order[0], 2 * order[0] + 2));
  for (size_t i = 1; i < order.size(); ++i) {
    const Partial next = block(in.q, in.kv, range(2 * order[i], 2 * order[i] + 2));
    ex::selected_seams().cp.merge(running.out, running.lse, next.out, next.lse);
  }
  check_close(running.out.to_vector(), whole.out.to_vector(), 1e-5f, "out");
  check_close(running.lse.to_vector(), whole.lse.to_vector(), 1e-5f, "lse");
}
}  // namespace

TEST_CASE("ex07 two halves of the keys merge into attention over all of them (3 pts)",
          "[grade][ex07]") {
  Inputs in;
  const Partial whole = block(in.q, in.kv, range(0, T));
  Partial first = block(in.q, in.kv, range(0, T / 2));
  const Partial second = block(in.q, in.kv, range(T / 2, T));
  ex::selected_seams().cp.merge(first.out, first.lse, second.out, second.lse);
  check_close(first.out.to_vector(), whole.out.to_vector(), 1e-5f, "out");
  check_close(first.lse.to_vector(), whole.lse.to_vector(), 1e-5f, "lse");
}

TEST_CASE("ex07 four blocks merged in ring order equal causal attention (3 pts)", "[grade][ex07]") {
  merge_blocks_in_order({0, 1, 2, 3});
  merge_blocks_in_order({2, 1, 0, 3});  // rank 2's ring order: own block first, then r-1, ...
}

TEST_CASE("ex07 a part that saw no key (lse -inf) weighs nothing (2 pts)", "[grade][ex07]") {
  const std::vector<float> o = values(B * T * C, 0.5f, 0.3f), l = values(B * H * T, 2.0f, 0.9f);
  // a non-empty result merged with an empty part is unchanged
  Tensor out = Tensor::from({B, T, C}, o), lse = Tensor::from({B, H, T}, l);
  const Tensor empty_out = Tensor::from({B, T, C}, std::vector<float>(B * T * C, 7.0f));
  const Tensor empty_lse = Tensor::from({B, H, T}, std::vector<float>(B * H * T, -kInf));
  ex::selected_seams().cp.merge(out, lse, empty_out, empty_lse);
  check_close(out.to_vector(), o, 1e-6f, "out after merging an empty part");
  check_close(lse.to_vector(), l, 1e-6f, "lse after merging an empty part");
  // an empty running result takes the part as it is
  Tensor none_out = Tensor::from({B, T, C}, std::vector<float>(B * T * C, 0.0f));
  Tensor none_lse = Tensor::from({B, H, T}, std::vector<float>(B * H * T, -kInf));
  ex::selected_seams().cp.merge(none_out, none_lse, Tensor::from({B, T, C}, o),
                                Tensor::from({B, H, T}, l));
  check_close(none_out.to_vector(), o, 1e-6f, "out of an empty result merged with a part");
  check_close(none_lse.to_vector(), l, 1e-6f, "lse of an empty result merged with a part");
  // two empty parts stay empty: lse -inf, out 0, no NaN
  Tensor both_out = Tensor::from({B, T, C}, std::vector<float>(B * T * C, 0.0f));
  Tensor both_lse = Tensor::from({B, H, T}, std::vector<float>(B * H * T, -kInf));
  ex::selected_seams().cp.merge(both_out, both_lse, empty_out.reshape({B, T, C}), empty_lse);
  check_close(both_lse.to_vector(), std::vector<float>(B * H * T, -kInf), 0, "lse of two empties");
  check_close(both_out.to_vector(), std::vector<float>(B * T * C, 0.0f), 0, "out of two empties");
}

TEST_CASE("ex07 log-sum-exps near 1000 merge without overflow (2 pts)", "[grade][ex07]") {
  // exp(1000) is inf in fp32: the merge must subtract the larger lse first.
  std::vector<float> la(B * H * T), lb(B * H * T);
  for (size_t i = 0; i < la.size(); ++i) {
    la[i] = 1000.0f + 0.25f * float(i % 5);
    lb[i] = 1000.0f + 0.5f * float(i % 3);
  }
  const std::vector<float> oa = values(B * T * C, 1.0f, 0.2f), ob = values(B * T * C, 1.0f, 1.1f);
  Tensor out = Tensor::from({B, T, C}, oa), lse = Tensor::from({B, H, T}, la);
  ex::selected_seams().cp.merge(out, lse, Tensor::from({B, T, C}, ob), Tensor::from({B, H, T}, lb));
  std::vector<float> want_out(oa.size()), want_lse(la.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const size_t r = size_t((b * H + h) * T + t);
        const double m = std::max(la[r], lb[r]);
        const double l = m + std::log(std::exp(la[r] - m) + std::exp(lb[r] - m));
        want_lse[r] = float(l);
        for (int64_t d = 0; d < C / H; ++d) {
          const size_t at = size_t((b * T + t) * C + h * (C / H) + d);
          want_out[at] = float(std::exp(la[r] - l) * oa[at] + std::exp(lb[r] - l) * ob[at]);
        }
      }
  // fp32 holds 1000 to about 6e-5, so the weights exp(lse_a - lse) carry that much rounding
  check_close(out.to_vector(), want_out, 2e-4f, "out");
  check_close(lse.to_vector(), want_lse, 1e-3f, "lse");
}

TEST_CASE("ex07 bonus: the merge's backward matches finite differences (2 pts)", "[grade][ex07]") {
  const std::vector<float> oa = values(B * T * C, 1.0f, 0.2f), ob = values(B * T * C, 1.0f, 1.1f);
  const std::vector<float> la = values(B * H * T, 1.0f, 0.4f), lb = values(B * H * T, 1.0f, 2.3f);
  const std::vector<float> g = values(B * T * C, 1.0f, 0.6f);  // d loss / d merged out
  // loss(part a) = sum(g * merge(a, b).out), by the reference merge (ops::attention_merge)
  auto loss = [&](const std::vector<float>& a_out, const std::vector<float>& a_lse) {
    Tensor out = Tensor::from({B, T, C}, a_out), lse = Tensor::from({B, H, T}, a_lse);
    ops::attention_merge(out, lse, Tensor::from({B, T, C}, ob), Tensor::from({B, H, T}, lb));
    double s = 0;
    const std::vector<float> o = out.to_vector();
    for (size_t i = 0; i < o.size(); ++i) s += double(g[i]) * o[i];
    return s;
  };
  Tensor merged_out = Tensor::from({B, T, C}, oa), merged_lse = Tensor::from({B, H, T}, la);
  ops::attention_merge(merged_out, merged_lse, Tensor::from({B, T, C}, ob),
                       Tensor::from({B, H, T}, lb));
  Tensor d_out = Tensor::zeros({B, T, C}, MemCategory::workspace);
  Tensor d_lse = Tensor::zeros({B, H, T}, MemCategory::workspace);
  ex::selected_seams().cp.merge_backward(d_out, d_lse, Tensor::from({B, T, C}, g), merged_out,
                                         merged_lse, Tensor::from({B, T, C}, oa),
                                         Tensor::from({B, H, T}, la));
  const double eps = 1e-2;
  std::vector<float> want_out(oa.size()), want_lse(la.size());
  for (size_t i = 0; i < oa.size(); ++i) {
    std::vector<float> up = oa, down = oa;
    up[i] += float(eps);
    down[i] -= float(eps);
    want_out[i] = float((loss(up, la) - loss(down, la)) / (2 * eps));
  }
  for (size_t i = 0; i < la.size(); ++i) {
    std::vector<float> up = la, down = la;
    up[i] += float(eps);
    down[i] -= float(eps);
    want_lse[i] = float((loss(oa, up) - loss(oa, down)) / (2 * eps));
  }
  check_close(d_out.to_vector(), want_out, 2e-3f, "d part_out");
  check_close(d_lse.to_vector(), want_lse, 2e-3f, "d part_lse");
}

// The ring-attention ops (core/ops/ops.h): attention computed one block of keys at a time and
// merged with the online-softmax rule equals causal attention over the whole sequence, forward
// (outputs and probabilities) and backward (dq, dk, dv), for any split of the keys; copy_columns
// moves and adds column ranges.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/ops/ops.h"

using namespace mgpu;

namespace {
constexpr int64_t B = 2, T = 8, C = 8, H = 2;

std::vector<float> values(int64_t n, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.41f * float(i) + phase);
  return v;
}

Tensor zeros(const Shape& shape) {
  return Tensor::zeros(shape, MemCategory::workspace);
}

std::vector<int32_t> range(int begin, int end) {
  std::vector<int32_t> r;
  for (int i = begin; i < end; ++i) r.push_back(i);
  return r;
}

// The rows [begin, end) of every sequence of a [B, T, W] tensor, as [B, end - begin, W].
Tensor positions_of(const Tensor& t, int begin, int end) {
  const int64_t w = t.dim(2), n = end - begin;
  Tensor out = zeros({B, n, w});
  Tensor rows = out.reshape({B, n * w});
  ops::copy_columns(rows, 0, t.reshape({B, T * w}), begin * w, n * w);
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(2e-6));
}
}  // namespace

TEST_CASE("block attention merged over any split of the keys equals causal attention",
          "[ops][ring]") {
  const Tensor qkv = Tensor::from({B, T, 3 * C}, values(B * T * 3 * C, 1.3f, 0.2f));
  const Tensor dout = Tensor::from({B, T, C}, values(B * T * C, 0.8f, 1.7f));
  Tensor out_ref = zeros({B, T, C}), att_ref = zeros({B, H, T, T}), dqkv_ref = zeros({B, T, 3 * C});
  ops::attention_forward(out_ref, att_ref, qkv, H);
  ops::attention_backward(dqkv_ref, dout, qkv, att_ref, H);

  Tensor q = zeros({B, T, C}), kv = zeros({B, T, 2 * C});
  ops::copy_columns(q, 0, qkv, 0, C);
  ops::copy_columns(kv, 0, qkv, C, 2 * C);
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{0, 8}, {0, 4, 8}, {0, 1, 5, 8}}) {
    INFO("key blocks cut at " << cuts.size() - 1 << " places");
    Tensor out = zeros({B, T, C}), lse = zeros({B, H, T}), scores = zeros({B, H, T, T});
    Tensor part = zeros({B, T, C}), part_lse = zeros({B, H, T});
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const Tensor block = positions_of(kv, cuts[k], cuts[k + 1]);
      const std::vector<int32_t> keys = range(cuts[k], cuts[k + 1]);
      if (k == 0) {
        ops::attention_block_forward(out, lse, scores, q, block, range(0, T), keys, H);
      } else {
        ops::attention_block_forward(part, part_lse, scores, q, block, range(0, T), keys, H);
        ops::attention_merge(out, lse, part, part_lse);
      }
    }
    check_close(out.to_vector(), out_ref.to_vector());
    // the kept scores give back the probabilities: exp(score - lse)
    std::vector<float> p = scores.to_vector();
    const std::vector<float> l = lse.to_vector();
    for (size_t i = 0; i < p.size(); ++i) p[i] = std::exp(p[i] - l[i / T]);
    check_close(p, att_ref.to_vector());

    Tensor dq = zeros({B, T, C}), dqkv = zeros({B, T, 3 * C});
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const Tensor block = positions_of(kv, cuts[k], cuts[k + 1]);
      Tensor dblock = zeros(block.shape());
      ops::attention_block_backward(dq, dblock, dout, out, q, block, scores, lse, range(0, T),
                                    range(cuts[k], cuts[k + 1]), H);
      const int64_t n = cuts[k + 1] - cuts[k];
      Tensor dkv_rows = zeros({B, n, 3 * C});  // this block's dk | dv placed as qkv columns
      ops::copy_columns(dkv_rows, C, dblock, 0, 2 * C);
      Tensor all_rows = dqkv.reshape({B, T * 3 * C});
      ops::copy_columns(all_rows, cuts[k] * 3 * C, dkv_rows.reshape({B, n * 3 * C}), 0, n * 3 * C,
                        /*add=*/true);
    }
    ops::copy_columns(dqkv, 0, dq, 0, C, /*add=*/true);
    check_close(dqkv.to_vector(), dqkv_ref.to_vector());
  }
}

TEST_CASE("a query that sees no key of a block gets lse -inf and a zero output", "[ops][ring]") {
  const Tensor q = Tensor::from({1, 2, 4}, values(8, 1.0f, 0.3f));
  const Tensor kv = Tensor::from({1, 2, 8}, values(16, 1.0f, 0.9f));
  Tensor out = zeros({1, 2, 4}), lse = zeros({1, 1, 2}), scores = zeros({1, 1, 2, 8});
  // queries at positions 2 and 5, keys at 4 and 5: the first query sees neither
  ops::attention_block_forward(out, lse, scores, q, kv, std::vector<int32_t>{2, 5},
                               std::vector<int32_t>{4, 5}, 1);
  const std::vector<float> l = lse.to_vector(), o = out.to_vector();
  CHECK(std::isinf(l[0]));
  CHECK(l[0] < 0);
  CHECK(std::isfinite(l[1]));
  for (int d = 0; d < 4; ++d) CHECK(o[size_t(d)] == 0.0f);
}

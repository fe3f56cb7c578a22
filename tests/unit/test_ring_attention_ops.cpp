// The ring-attention ops (core/ops/ops.h): attention computed one block of keys at a time and
// merged with the online-softmax rule equals causal attention over the whole sequence, forward
// (outputs and probabilities) and backward (dq, dk, dv), for any split of the keys; copy_columns
// moves and adds column ranges; and the per-row math those kernels share with the CUDA ones.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops/math/attention.h"
#include "core/ops/ops.h"

namespace test_ring_attention_ops {

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

// Block attention merged over splits of the keys against causal attention over the whole
// sequence, with `kv` kv heads (H: multi-head; fewer: grouped-query, query head h reads h/(H/kv)).
void check_splits_equal_causal_attention(int64_t kv_heads) {
  const int64_t kv_c = kv_heads * (C / H), W = C + 2 * kv_c;  // qkv: q | k | v
  const Tensor qkv = Tensor::from({B, T, W}, values(B * T * W, 1.3f, 0.2f));
  const Tensor dout = Tensor::from({B, T, C}, values(B * T * C, 0.8f, 1.7f));
  Tensor out_ref = zeros({B, T, C}), att_ref = zeros({B, H, T, T}), dqkv_ref = zeros({B, T, W});
  ops::attention_forward(out_ref, att_ref, qkv, H, int(kv_heads));
  ops::attention_backward(dqkv_ref, dout, qkv, att_ref, H, int(kv_heads));

  Tensor q = zeros({B, T, C}), kv = zeros({B, T, 2 * kv_c});
  ops::copy_columns(q, 0, qkv, 0, C);
  ops::copy_columns(kv, 0, qkv, C, 2 * kv_c);
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{0, 8}, {0, 4, 8}, {0, 1, 5, 8}}) {
    INFO("key blocks cut at " << cuts.size() - 1 << " places");
    Tensor out = zeros({B, T, C}), lse = zeros({B, H, T}), scores = zeros({B, H, T, T});
    Tensor part = zeros({B, T, C}), part_lse = zeros({B, H, T});
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const Tensor block = positions_of(kv, cuts[k], cuts[k + 1]);
      const std::vector<int32_t> keys = range(cuts[k], cuts[k + 1]);
      if (k == 0) {
        ops::attention_block_forward(out, lse, scores, q, block, range(0, T), keys, H,
                                     int(kv_heads));
      } else {
        ops::attention_block_forward(part, part_lse, scores, q, block, range(0, T), keys, H,
                                     int(kv_heads));
        ops::attention_merge(out, lse, part, part_lse);
      }
    }
    check_close(out.to_vector(), out_ref.to_vector());
    // the kept scores give back the probabilities: exp(score - lse)
    std::vector<float> p = scores.to_vector();
    const std::vector<float> l = lse.to_vector();
    for (size_t i = 0; i < p.size(); ++i) p[i] = std::exp(p[i] - l[i / T]);
    check_close(p, att_ref.to_vector());

    Tensor dq = zeros({B, T, C}), dqkv = zeros({B, T, W});
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const Tensor block = positions_of(kv, cuts[k], cuts[k + 1]);
      Tensor dblock = zeros(block.shape());
      ops::attention_block_backward(dq, dblock, dout, out, q, block, scores, lse, range(0, T),
                                    range(cuts[k], cuts[k + 1]), H, int(kv_heads));
      const int64_t n = cuts[k + 1] - cuts[k];
      Tensor dkv_rows = zeros({B, n, W});  // this block's dk | dv placed as qkv columns
      ops::copy_columns(dkv_rows, C, dblock, 0, 2 * kv_c);
      Tensor all_rows = dqkv.reshape({B, T * W});
      ops::copy_columns(all_rows, cuts[k] * W, dkv_rows.reshape({B, n * W}), 0, n * W,
                        /*add=*/true);
    }
    ops::copy_columns(dqkv, 0, dq, 0, C, /*add=*/true);
    check_close(dqkv.to_vector(), dqkv_ref.to_vector());
  }
}
}  // namespace

TEST_CASE("block attention merged over any split of the keys equals causal attention",
          "[ops][ring]") {
  check_splits_equal_causal_attention(H);
}

TEST_CASE("grouped-query block attention merged over any split of the keys equals causal GQA",
          "[ops][ring][llama]") {
  // one kv head for both query heads: its dK|dV sums over the group, block by block
  check_splits_equal_causal_attention(1);
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

// ---- the shared math (core/ops/math/attention.h), which the CUDA kernels call too ----------

TEST_CASE("visibility: visible_keys and first_seeing_query pick the causal pairs", "[ops][ring]") {
  const std::vector<std::vector<int32_t>> position_sets = {
      {}, {0}, {3}, {0, 1, 2, 3}, {2, 3, 6, 7}, {1, 4, 4, 9}, {0, 5, 6, 11, 12, 15}};
  for (const auto& pos : position_sets)
    for (int32_t p = -1; p <= 16; ++p) {
      INFO(pos.size() << " positions, query/key at " << p);
      // keys visible to a query at p: kv_pos[j] <= p, a prefix (causal by global position)
      int64_t visible = 0;
      for (int32_t k : pos) visible += k <= p ? 1 : 0;
      CHECK(math::visible_keys(pos.data(), int64_t(pos.size()), p) == visible);
      // queries that see a key at p: q_pos[i] >= p, a suffix starting where this returns
      int64_t before = 0;
      for (int32_t q : pos) before += q < p ? 1 : 0;
      CHECK(math::first_seeing_query(pos.data(), int64_t(pos.size()), p) == before);
    }
}

TEST_CASE("the online-softmax merge equals the softmax over both key sets (double reference)",
          "[ops][ring]") {
  // One query row, head size 3, seven keys' scores split in two blocks at every cut.
  const std::vector<double> scores = {0.3, -1.2, 2.5, 0.0, 1.1, -0.4, 3.0};
  const std::vector<std::vector<double>> values = {
      {1, 0, 2}, {0.5, -1, 0}, {2, 2, -1}, {0, 1, 1}, {-2, 0.5, 3}, {1, 1, 1}, {0.2, 0, -3}};
  double ref_sum = 0;
  std::vector<double> ref_out(3, 0.0);
  for (size_t j = 0; j < scores.size(); ++j) ref_sum += std::exp(scores[j]);
  for (size_t j = 0; j < scores.size(); ++j)
    for (int d = 0; d < 3; ++d)
      ref_out[size_t(d)] += std::exp(scores[j]) / ref_sum * values[j][size_t(d)];
  // A block's partial result the way the kernels compute it: max, shifted exps, lse.
  auto partial = [&](size_t begin, size_t end, std::vector<float>& out) {
    float mx = math::kMaskedScore, sum = 0.0f;
    for (size_t j = begin; j < end; ++j) mx = math::larger(mx, float(scores[j]));
    out.assign(3, 0.0f);
    for (size_t j = begin; j < end; ++j) {
      const float p = math::shifted_exp(float(scores[j]), mx);
      sum += p;
      for (int d = 0; d < 3; ++d) out[size_t(d)] += p * float(values[j][size_t(d)]);
    }
    for (float& o : out) o /= sum;
    return math::block_lse(mx, sum);
  };
  for (size_t cut = 1; cut < scores.size(); ++cut) {
    INFO("blocks [0, " << cut << ") and [" << cut << ", 7)");
    std::vector<float> out_a, out_b;
    const float lse_a = partial(0, cut, out_a), lse_b = partial(cut, scores.size(), out_b);
    math::MergeWeights w;
    REQUIRE(math::merge_weights(lse_a, lse_b, &w));
    CHECK(w.lse == Approx(std::log(ref_sum)).epsilon(1e-6));
    CHECK(w.a + w.b == Approx(1.0).epsilon(1e-6));
    for (int d = 0; d < 3; ++d)
      CHECK(math::merged_value(w, out_a[size_t(d)], out_b[size_t(d)]) ==
            Approx(ref_out[size_t(d)]).margin(1e-6));
    // and each pair's probability from its score and the merged lse
    for (size_t j = 0; j < scores.size(); ++j)
      CHECK(math::probability(float(scores[j]), w.lse) ==
            Approx(std::exp(scores[j]) / ref_sum).margin(1e-7));
  }
}

TEST_CASE("the merge's edge cases: an empty part, two empty parts, scores far from zero",
          "[ops][ring]") {
  const float inf = std::numeric_limits<float>::infinity();
  math::MergeWeights w;
  // an empty part (lse -inf: no visible key) takes no weight; the other part is kept as it is
  REQUIRE(math::merge_weights(-inf, 0.7f, &w));
  CHECK(w.a == 0.0f);
  CHECK(w.b == 1.0f);
  CHECK(w.lse == 0.7f);
  REQUIRE(math::merge_weights(1.5f, -inf, &w));
  CHECK(w.a == 1.0f);
  CHECK(w.b == 0.0f);
  // neither part saw a key: nothing to merge (the row keeps lse -inf and its zero output)
  CHECK_FALSE(math::merge_weights(-inf, -inf, &w));
  // large scores: shifting by the max keeps every exp finite
  REQUIRE(math::merge_weights(1000.0f, 999.0f, &w));
  CHECK(std::isfinite(w.lse));
  CHECK(w.lse == Approx(1000.0 + std::log1p(std::exp(-1.0))).epsilon(1e-6));
  // a weight is exp(lse_a - lse), two floats near 1000 spaced 2^-14 apart: its relative error
  // is about that spacing (the merged lse is rounded to it), so within 2 of those spacings
  const double spacing = std::ldexp(1.0, -14);
  CHECK(w.a == Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(2 * spacing));
  CHECK(w.b == Approx(1.0 / (1.0 + std::exp(1.0))).epsilon(2 * spacing));
  CHECK(math::block_lse(-500.0f, 2.0f) == Approx(-500.0 + std::log(2.0)).epsilon(1e-7));
}

TEST_CASE("the score and its gradient match their formulas in double", "[ops][ring]") {
  for (int64_t hs : {1, 4, 12, 64})
    CHECK(math::attention_scale(hs) == Approx(1.0 / std::sqrt(double(hs))).epsilon(1e-7));
  const float q[4] = {0.5f, -1.0f, 2.0f, 0.25f}, k[4] = {1.5f, 0.5f, -0.75f, 4.0f};
  const double qk = 0.5 * 1.5 - 1.0 * 0.5 - 2.0 * 0.75 + 0.25 * 4.0;
  CHECK(math::scaled_score(q, k, 4, 0.5f) == Approx(0.5 * qk).epsilon(1e-7));
  // dS = P (dP - D) / sqrt(hs): zero when dP equals the row term
  CHECK(math::score_grad(0.3f, 1.25f, 0.5f, 0.5f) == Approx(0.3 * 0.75 * 0.5).epsilon(1e-7));
  CHECK(math::score_grad(0.3f, 0.5f, 0.5f, 0.5f) == 0.0f);
  CHECK(math::shifted_exp(2.0f, 2.0f) == 1.0f);
  CHECK(math::probability(math::kMaskedScore, 0.3f) == 0.0f);  // a masked pair: probability 0
}

namespace {
// ring_attention.cu's thread decomposition replayed on the CPU for `kv_heads` of 2 query heads.
void check_gpu_decomposition(int64_t kv_heads) {
  const int64_t b = 2, heads = 2, c = 8, hs = c / heads, t = 16;
  const int64_t group = heads / kv_heads, kv_c = kv_heads * hs;
  const std::vector<int32_t> q_pos = {4, 5, 10, 11}, kv_pos = {3, 5, 6, 9, 10, 15};
  const int64_t tq = int64_t(q_pos.size()), tk = int64_t(kv_pos.size());
  const float scale = math::attention_scale(hs);
  const Tensor q = Tensor::from({b, tq, c}, values(b * tq * c, 1.1f, 0.4f));
  const Tensor kv = Tensor::from({b, tk, 2 * kv_c}, values(b * tk * 2 * kv_c, 0.9f, 2.1f));
  const Tensor dout = Tensor::from({b, tq, c}, values(b * tq * c, 0.7f, 1.3f));
  const std::vector<float> scores0 = values(b * heads * tq * t, 0.5f, 0.8f);  // untouched columns
  const std::vector<float> dq0 = values(b * tq * c, 0.3f, 0.1f),
                           dkv0 = values(b * tk * 2 * kv_c, 0.2f, 2.9f);

  Tensor out = zeros({b, tq, c}), lse = zeros({b, heads, tq});
  Tensor scores = Tensor::from({b, heads, tq, t}, scores0);
  ops::attention_block_forward(out, lse, scores, q, kv, q_pos, kv_pos, int(heads), int(kv_heads));
  Tensor dq = Tensor::from({b, tq, c}, dq0), dkv = Tensor::from({b, tk, 2 * kv_c}, dkv0);
  ops::attention_block_backward(dq, dkv, dout, out, q, kv, scores, lse, q_pos, kv_pos, int(heads),
                                int(kv_heads));

  std::vector<float> g_scores = scores0, g_out(size_t(b * tq * c)), g_lse(size_t(b * heads * tq));
  std::vector<float> g_dq = dq0, g_dkv = dkv0, pair_p(size_t(b * heads * tq * tk));
  std::vector<float> pair_ds(pair_p.size());
  const float *qd = q.f32(), *kvd = kv.f32(), *doutd = dout.f32();
  const float* outd = g_out.data();
  for (int64_t row = 0; row < b * heads * tq; ++row) {  // the forward, one block per row
    const int64_t i = row % tq, h = (row / tq) % heads, bi = row / tq / heads;
    const float* qi = qd + (bi * tq + i) * c + h * hs;
    const float* keys = kvd + bi * tk * 2 * kv_c + h / group * hs;
    float* srow = g_scores.data() + row * t;
    const int64_t n = math::visible_keys(kv_pos.data(), tk, q_pos[size_t(i)]);
    for (int64_t j = 0; j < tk; ++j)
      srow[kv_pos[size_t(j)]] =
          j < n ? math::scaled_score(qi, keys + j * 2 * kv_c, hs, scale) : math::kMaskedScore;
    for (int64_t d = 0; d < hs; ++d) {
      const math::ChannelOut o =
          math::block_forward_channel(srow, kv_pos.data(), n, keys + kv_c + d, 2 * kv_c);
      g_out[size_t((bi * tq + i) * c + h * hs + d)] = o.out;
      if (d == 0) g_lse[size_t(row)] = o.lse;
    }
  }
  for (int64_t row = 0; row < b * heads * tq; ++row) {  // the backward's query kernel
    const int64_t i = row % tq, h = (row / tq) % heads, bi = row / tq / heads;
    const int64_t qi_at = (bi * tq + i) * c + h * hs;
    const float* keys = kvd + bi * tk * 2 * kv_c + h / group * hs;
    const int64_t n = math::visible_keys(kv_pos.data(), tk, q_pos[size_t(i)]);
    const float row_term = math::dot(doutd + qi_at, outd + qi_at, hs);
    for (int64_t j = 0; j < n; ++j) {
      const math::PairGrad g =
          math::pair_grad(g_scores[size_t(row * t + kv_pos[size_t(j)])], g_lse[size_t(row)],
                          doutd + qi_at, keys + j * 2 * kv_c + kv_c, hs, row_term, scale);
      pair_p[size_t(row * tk + j)] = g.p;
      pair_ds[size_t(row * tk + j)] = g.ds;
    }
    for (int64_t d = 0; d < hs; ++d)
      g_dq[size_t(qi_at + d)] = math::dq_channel(g_dq[size_t(qi_at + d)], pair_ds.data() + row * tk,
                                                 n, keys + d, 2 * kv_c);
  }
  for (int64_t key_row = 0; key_row < b * kv_heads * tk; ++key_row) {  // the key kernel
    const int64_t j = key_row % tk, g = (key_row / tk) % kv_heads, bi = key_row / tk / kv_heads;
    const int64_t k_at = (bi * tk + j) * 2 * kv_c + g * hs;
    const int64_t first = math::first_seeing_query(q_pos.data(), tq, kv_pos[size_t(j)]);
    if (first == tq) continue;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {  // the group's heads, in order
      const int64_t pair = ((bi * heads + h) * tq + first) * tk + j;
      const int64_t q_at = (bi * tq + first) * c + h * hs;
      for (int64_t d = 0; d < hs; ++d)
        math::dkv_channel(&g_dkv[size_t(k_at + d)], &g_dkv[size_t(k_at + kv_c + d)],
                          pair_p.data() + pair, pair_ds.data() + pair, tk, qd + q_at + d,
                          doutd + q_at + d, c, tq - first);
    }
  }
  auto same_bits = [](const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  };
  same_bits(g_scores, scores.to_vector());
  same_bits(g_out, out.to_vector());
  same_bits(g_lse, lse.to_vector());
  same_bits(g_dq, dq.to_vector());
  same_bits(g_dkv, dkv.to_vector());
}
}  // namespace

TEST_CASE("each GPU thread's share, run in the GPU's decomposition, gives the CPU kernels' bits",
          "[ops][ring]") {
  // ring_attention.cu's layout replayed on the CPU: per (batch, head, query) row the scores, then
  // one output channel per "thread" (block_forward_channel); backward per row the pairs' p and dS,
  // dQ per channel (dq_channel), and per key dK/dV per channel (dkv_channel). The kernels index
  // exactly like this; the CPU kernels loop keys outside and channels inside. Multi-head (2 kv
  // heads) and grouped-query (1 kv head: the key kernel adds both query heads' shares, in order).
  for (const int64_t kv_heads : {2, 1}) {
    INFO("kv heads " << kv_heads);
    check_gpu_decomposition(kv_heads);
  }
}

}  // namespace test_ring_attention_ops

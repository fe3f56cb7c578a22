// Ring attention's per-row math, shared by the CPU kernels (core/ops/cpu/ring_attention.cpp) and
// the CUDA kernels (core/ops/cuda/ring_attention.cu). A query attends to one block of keys at a
// time: the block gives a partial result, its output normalised over the block's visible keys
// and the log-sum-exp (lse) of their scores, and the online-softmax rule merges two partial
// results into the attention over both key sets (Milakov & Gimelshein 2018, "Online normalizer
// calculation for softmax"; Liu et al. 2023, "Ring Attention with Blockwise Transformers").
// Visibility is causal by GLOBAL token position, so a block may be fully, partly or not visible.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/ops/math/elementwise.h"
#include "core/ops/math/hd.h"
#include "core/ops/math/rows.h"

namespace mgpu::math {

// The score of a masked (query, key) pair, and the lse of a row that saw no key.
constexpr float kMaskedScore = -INFINITY;

// 1 / sqrt(head size): scores are q . k scaled by it (Vaswani et al. 2017).
MGPU_HD float attention_scale(int64_t head_size) {
  return 1.0f / sqrtf(static_cast<float>(head_size));
}

// Keys visible to a query at position p: the prefix of kv_pos (ascending) with kv_pos[j] <= p.
MGPU_HD int64_t visible_keys(const int32_t* kv_pos, int64_t tk, int32_t p) {
  int64_t lo = 0, hi = tk;  // the first j with kv_pos[j] > p lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (kv_pos[mid] <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Queries that see a key at position k: the suffix of q_pos (ascending) from the first
// q_pos[i] >= k. Returns where it starts. (The same pairs as visible_keys, seen from the key.)
MGPU_HD int64_t first_seeing_query(const int32_t* q_pos, int64_t tq, int32_t k) {
  int64_t lo = 0, hi = tq;  // the first i with q_pos[i] >= k lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (q_pos[mid] < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The scaled score of query row q against key row k (head size hs).
MGPU_HD float scaled_score(const float* q, const float* k, int64_t hs, float scale) {
  return scale * dot(q, k, hs);
}

// A visible key's unnormalised weight inside its block: exp(score - the block's max score).
MGPU_HD float shifted_exp(float score, float max) {
  return expf(score - max);
}

// The block's lse from its max score and the sum of its shifted exps.
MGPU_HD float block_lse(float max, float sum_shifted_exp) {
  return max + logf(sum_shifted_exp);
}

// The final probability of a pair, from its kept score and the row's merged lse.
MGPU_HD float probability(float score, float lse) {
  return expf(score - lse);
}

// The softmax backward's share of one pair: dS = P (dP - D) / sqrt(hs), where dP = dO . v and
// D = dO . O (the row term over ALL keys, known from the merged output alone).
MGPU_HD float score_grad(float p, float dp, float row_term, float scale) {
  return p * (dp - row_term) * scale;
}

// The online-softmax merge of two partial results a and b of one query row:
//   lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b.
struct MergeWeights {
  float lse = kMaskedScore;  // the merged lse
  float a = 0.0f, b = 0.0f;  // the weights of out_a and out_b
};

// False when neither part saw a key (both lse are -inf): the row stays as it is.
MGPU_HD bool merge_weights(float lse_a, float lse_b, MergeWeights* w) {
  const float m = larger(lse_a, lse_b);
  if (m == kMaskedScore) return false;
  const float merged = m + logf(expf(lse_a - m) + expf(lse_b - m));
  w->lse = merged;
  w->a = expf(lse_a - merged);
  w->b = expf(lse_b - merged);
  return true;
}

MGPU_HD float merged_value(const MergeWeights& w, float out_a, float out_b) {
  return w.a * out_a + w.b * out_b;
}

// The backward of one visible pair (query row i, key j): the final probability and dS.
struct PairGrad {
  float p, ds;
};
MGPU_HD PairGrad pair_grad(float score, float lse, const float* dout_i, const float* value_j,
                           int64_t hs, float row_term, float scale) {
  const float p = probability(score, lse);
  return {p, score_grad(p, dot(dout_i, value_j, hs), row_term, scale)};
}

// ---- one GPU thread's share ------------------------------------------------------------------
// The CUDA kernels (ring_attention.cu) split a row's work over threads, one output channel per
// thread, where the CPU kernel loops over keys outside and channels inside. Each function below
// is one thread's part, doing for its element the CPU kernel's operations in the CPU kernel's
// order; tests/unit/test_ring_attention_ops.cpp runs them in the GPU's decomposition on the CPU
// and compares with the CPU kernels bit for bit.

// Forward, output channel d of a query row that sees its block's first n keys: key j's score is
// scores[kv_pos[j]], its value's channel d is value_d[j * value_stride]. The row's lse comes
// with it; a row that sees no key is an empty partial result (0, -inf).
struct ChannelOut {
  float out, lse;
};
MGPU_HD ChannelOut block_forward_channel(const float* scores, const int32_t* kv_pos, int64_t n,
                                         const float* value_d, int64_t value_stride) {
  if (n == 0) return {0.0f, kMaskedScore};
  float mx = kMaskedScore;
  for (int64_t j = 0; j < n; j++) mx = larger(mx, scores[kv_pos[j]]);
  float sum = 0.0f, acc = 0.0f;
  for (int64_t j = 0; j < n; j++) {
    const float p = shifted_exp(scores[kv_pos[j]], mx);
    sum += p;
    acc += p * value_d[j * value_stride];
  }
  return {acc / sum, block_lse(mx, sum)};
}

// dQ channel d of a query row: dq + the sum over its n visible keys, in ascending order, of
// dS_j times key j's channel d (key_d[j * key_stride]).
MGPU_HD float dq_channel(float dq, const float* ds, int64_t n, const float* key_d,
                         int64_t key_stride) {
  for (int64_t j = 0; j < n; j++) dq += ds[j] * key_d[j * key_stride];
  return dq;
}

// dK and dV channel d of one key, added to over the `count` queries that see it in ascending
// order: query i's channel d at q_d[i * row_stride] and dout_d[i * row_stride], its pair's p
// and dS at p[i * pair_stride] and ds[i * pair_stride].
MGPU_HD void dkv_channel(float* dk, float* dv, const float* p, const float* ds, int64_t pair_stride,
                         const float* q_d, const float* dout_d, int64_t row_stride, int64_t count) {
  float k = *dk, v = *dv;
  for (int64_t i = 0; i < count; i++) {
    v += p[i * pair_stride] * dout_d[i * row_stride];
    k += ds[i * pair_stride] * q_d[i * row_stride];
  }
  *dk = k;
  *dv = v;
}

}  // namespace mgpu::math

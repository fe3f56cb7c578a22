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

// The larger of two scores, as std::max(a, b) picks it.
MGPU_HD float max_score(float a, float b) {
  return a < b ? b : a;
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
  const float m = max_score(lse_a, lse_b);
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

}  // namespace mgpu::math

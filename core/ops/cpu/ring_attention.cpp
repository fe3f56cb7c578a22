// Ring attention's kernels (context parallelism): attention of a rank's queries against ONE block
// of keys and values at a time, the log-sum-exp merge of two such partial results, and the
// strided column copy that packs k | v out of qkv. Plain loops over visible (query, key) pairs:
// the masks here come from global token positions, so a block may be fully visible, partly
// visible or not at all, and only visible pairs cost anything. The per-pair and per-row math is
// core/ops/math/attention.h's, which the CUDA kernels (core/ops/cuda/ring_attention.cu) call too.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/ops/math/attention.h"

namespace mgpu::cpu {

using math::dot;
using math::kMaskedScore;
using math::visible_keys;

// Grouped-query attention: query head h reads kv head h / group of kv [.., 2 * kv_c] (k | v).
// group = 1 (kv_c = c) is multi-head attention.
void attention_block_forward(float* out, float* lse, float* scores, const float* q, const float* kv,
                             const int32_t* q_pos, const int32_t* kv_pos, int64_t b, int64_t tq,
                             int64_t tk, int64_t c, int64_t heads, int64_t kv_heads,
                             int64_t score_cols) {
  const int64_t hs = c / heads, group = heads / kv_heads, kv_c = kv_heads * hs;
  const float scale = math::attention_scale(hs);
  std::vector<float> s(static_cast<size_t>(tk));
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < tq; i++) {
        const float* qi = q + (bi * tq + i) * c + h * hs;
        const float* keys = kv + bi * tk * 2 * kv_c + h / group * hs;  // key j at j * 2 kv_c
        float* oi = out + (bi * tq + i) * c + h * hs;
        float* row = scores + ((bi * heads + h) * tq + i) * score_cols;
        float& lse_i = lse[(bi * heads + h) * tq + i];
        const int64_t n = visible_keys(kv_pos, tk, q_pos[i]);
        for (int64_t j = n; j < tk; j++) row[kv_pos[j]] = kMaskedScore;  // probability 0
        std::fill(oi, oi + hs, 0.0f);
        if (n == 0) {  // no key of this block is visible: an empty partial result
          lse_i = kMaskedScore;
          continue;
        }
        float mx = kMaskedScore;
        for (int64_t j = 0; j < n; j++) {
          s[j] = math::scaled_score(qi, keys + j * 2 * kv_c, hs, scale);
          row[kv_pos[j]] = s[j];
          mx = math::larger(mx, s[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
          const float p = math::shifted_exp(s[j], mx);
          sum += p;
          const float* vj = keys + j * 2 * kv_c + kv_c;
          for (int64_t d = 0; d < hs; d++) oi[d] += p * vj[d];
        }
        for (int64_t d = 0; d < hs; d++) oi[d] /= sum;
        lse_i = math::block_lse(mx, sum);
      }
}

// A kv head's dK|dV gathers its query group's shares: heads of the group in ascending order,
// then queries, then keys (the order the CUDA key kernel adds them in).
void attention_block_backward(float* dq, float* dkv, const float* dout, const float* out,
                              const float* q, const float* kv, const float* scores,
                              const float* lse, const int32_t* q_pos, const int32_t* kv_pos,
                              int64_t b, int64_t tq, int64_t tk, int64_t c, int64_t heads,
                              int64_t kv_heads, int64_t score_cols) {
  const int64_t hs = c / heads, group = heads / kv_heads, kv_c = kv_heads * hs;
  const float scale = math::attention_scale(hs);
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < tq; i++) {
        const int64_t n = visible_keys(kv_pos, tk, q_pos[i]);
        if (n == 0) continue;
        const int64_t qi_at = (bi * tq + i) * c + h * hs;
        // D_i = sum_j P_ij dP_ij = dO_i . O_i over ALL keys: the softmax backward's row term,
        // known from the merged output alone (so each block's share is computed on its own).
        const float d_i = dot(dout + qi_at, out + qi_at, hs);
        const float* row = scores + ((bi * heads + h) * tq + i) * score_cols;
        const float lse_i = lse[(bi * heads + h) * tq + i];
        for (int64_t j = 0; j < n; j++) {
          const int64_t k_at = (bi * tk + j) * 2 * kv_c + h / group * hs, v_at = k_at + kv_c;
          const math::PairGrad g =
              math::pair_grad(row[kv_pos[j]], lse_i, dout + qi_at, kv + v_at, hs, d_i, scale);
          for (int64_t d = 0; d < hs; d++) {
            dkv[v_at + d] += g.p * dout[qi_at + d];
            dq[qi_at + d] += g.ds * kv[k_at + d];
            dkv[k_at + d] += g.ds * q[qi_at + d];
          }
        }
      }
}

void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t b, int64_t t, int64_t c, int64_t heads) {
  const int64_t hs = c / heads;
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < t; i++) {
        float& l = lse[(bi * heads + h) * t + i];
        math::MergeWeights w;
        if (!math::merge_weights(l, block_lse[(bi * heads + h) * t + i], &w))
          continue;  // neither part saw a key
        float* o = out + (bi * t + i) * c + h * hs;
        const float* ob = block_out + (bi * t + i) * c + h * hs;
        for (int64_t d = 0; d < hs; d++) o[d] = math::merged_value(w, o[d], ob[d]);
        l = w.lse;
      }
}

void copy_columns(float* dst, int64_t dst_cols, int64_t dst_begin, const float* src,
                  int64_t src_cols, int64_t src_begin, int64_t width, int64_t rows, bool add) {
  for (int64_t r = 0; r < rows; r++) {
    float* d = dst + r * dst_cols + dst_begin;
    const float* s = src + r * src_cols + src_begin;
    if (add)
      for (int64_t i = 0; i < width; i++) d[i] += s[i];
    else
      std::memcpy(d, s, static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace mgpu::cpu

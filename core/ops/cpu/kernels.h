// CPU kernels: plain functions on raw float pointers and sizes, in the style of llm.c. Each does
// one thing; ops.h is the typed entry point (cost accounting, device dispatch, shape checks) and
// the only caller. Conventions:
//  - "N" is the number of rows (tokens, B*T), "C" the channels of a row.
//  - Activation gradients (dinp, dqkv, dlogits, ...) are OVERWRITTEN.
//  - Parameter gradients (dweight, dbias, dwte, ...) are ACCUMULATED (+=), so gradient
//    accumulation over micro-batches is just "run backward again".
#pragma once
#include <cstdint>

#include "core/ops/cpu/vectorize.h"  // every declaration carries its clones (clang needs it)

namespace mgpu::cpu {

// Ranks are threads that run their own GEMMs: OpenBLAS gets one thread, and the worker pool it
// starts when it is loaded is stopped, since an idle worker spins for its first ~0.1 s and takes
// a core from the ranks. Once per process (World does it; matmul makes sure).
void use_one_blas_thread();

// C[M,N] = op(A) @ op(B) + beta * C, row-major; op(X) = X^T when trans_X. Uses OpenBLAS sgemm.
void matmul(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a,
            bool trans_b, float beta);

MGPU_VECTOR_CLONES_DECL void bias_add(float* out, const float* bias, int64_t n,
                                      int64_t c);  // out[n,:] += bias
MGPU_VECTOR_CLONES_DECL void bias_grad(float* dbias, const float* dout, int64_t n,
                                       int64_t c);  // dbias += colsum(dout)
MGPU_VECTOR_CLONES_DECL void add(float* out, const float* a, const float* b,
                                 int64_t count);  // out = a + b
MGPU_VECTOR_CLONES_DECL void axpy(float* y, float alpha, const float* x,
                                  int64_t count);                          // y += alpha * x
MGPU_VECTOR_CLONES_DECL void scale(float* x, float alpha, int64_t count);  // x *= alpha

MGPU_VECTOR_CLONES_DECL void gelu_forward(float* out, const float* inp, int64_t count);
MGPU_VECTOR_CLONES_DECL void gelu_backward(float* dinp, const float* inp, const float* dout,
                                           int64_t count);

MGPU_VECTOR_CLONES_DECL void layernorm_forward(float* out, float* mean, float* rstd,
                                               const float* inp, const float* weight,
                                               const float* bias, int64_t n, int64_t c);
MGPU_VECTOR_CLONES_DECL void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                                const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int64_t n, int64_t c);

MGPU_VECTOR_CLONES_DECL void softmax_forward(float* out, const float* inp, int64_t n, int64_t c);
MGPU_VECTOR_CLONES_DECL void softmax_backward(float* dinp, const float* out, const float* dout,
                                              int64_t n, int64_t c);

// Causal grouped-query self-attention (multi-head when kv_heads == heads). With hs = c / heads,
// qkv [B,T,c + 2 kv_heads hs] holds q (c) | k (kv_heads hs) | v (kv_heads hs) per token; query
// head h reads kv head h / (heads / kv_heads). out [B,T,c]; att [B,heads,T,T] keeps the
// probabilities for backward (entries above the diagonal stay 0). The backward adds each kv
// head's gradient over its query group, in ascending query head.
MGPU_VECTOR_CLONES_DECL void attention_forward(float* out, float* att, const float* qkv, int64_t b,
                                               int64_t t, int64_t c, int64_t heads,
                                               int64_t kv_heads);
MGPU_VECTOR_CLONES_DECL void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                                const float* att, int64_t b, int64_t t, int64_t c,
                                                int64_t heads, int64_t kv_heads);

// A Llama-style block's ops (llama_kernels.cpp; the math in core/ops/math/llama.h).
// RMSNorm over rows of c: out = inp * rstd * weight, rstd [n] saved; dweight ACCUMULATES.
MGPU_VECTOR_CLONES_DECL void rmsnorm_forward(float* out, float* rstd, const float* inp,
                                             const float* weight, int64_t n, int64_t c);
MGPU_VECTOR_CLONES_DECL void rmsnorm_backward(float* dinp, float* dweight, const float* dout,
                                              const float* inp, const float* weight,
                                              const float* rstd, int64_t n, int64_t c);
// SwiGLU: gate_up [n, 2f] = gate | up, out [n, f] = silu(gate) * up; dgate_up overwritten.
MGPU_VECTOR_CLONES_DECL void swiglu_forward(float* out, const float* gate_up, int64_t n, int64_t f);
MGPU_VECTOR_CLONES_DECL void swiglu_backward(float* dgate_up, const float* gate_up,
                                             const float* dout, int64_t n, int64_t f);
// RoPE in place on the first heads * head_size columns of each row of x [b, t, row_width]:
// token ti's pairs (2i, 2i+1) of every head turn by positions[ti] * theta^(-2i/head_size)
// (backward: by minus that). positions: t HOST entries.
void rope_forward(float* x, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                  int64_t head_size, int64_t row_width, float theta);
void rope_backward(float* dx, const int32_t* positions, int64_t b, int64_t t, int64_t heads,
                   int64_t head_size, int64_t row_width, float theta);

// Ring attention (core/ops/cpu/ring_attention.cpp). Queries q [b,tq,c] (heads of c/heads) against
// one block of keys and values kv [b,tk,2*kv_c] (k | v, kv_c = kv_heads * c/heads; query head h
// reads kv head h / (heads/kv_heads)); key j is visible to query i when kv_pos[j] <= q_pos[i]
// (global positions, both ascending). out [b,tq,c] is the block's own softmax-weighted sum,
// lse [b,heads,tq] its log-sum-exp (-inf where no key is visible), and the scaled scores go to
// column kv_pos[j] of scores [b,heads,tq,score_cols] (-inf where masked).
void attention_block_forward(float* out, float* lse, float* scores, const float* q, const float* kv,
                             const int32_t* q_pos, const int32_t* kv_pos, int64_t b, int64_t tq,
                             int64_t tk, int64_t c, int64_t heads, int64_t kv_heads,
                             int64_t score_cols);
// The block's share of the gradients, from the merged out and lse: dq and dkv ACCUMULATE (a kv
// head's over its query group, heads in ascending order).
void attention_block_backward(float* dq, float* dkv, const float* dout, const float* out,
                              const float* q, const float* kv, const float* scores,
                              const float* lse, const int32_t* q_pos, const int32_t* kv_pos,
                              int64_t b, int64_t tq, int64_t tk, int64_t c, int64_t heads,
                              int64_t kv_heads, int64_t score_cols);
// (out, lse) <- the online-softmax merge of (out, lse) and (block_out, block_lse).
void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t b, int64_t t, int64_t c, int64_t heads);
// dst[r, dst_begin + i] = (or +=, with add) src[r, src_begin + i] for i < width, r < rows.
void copy_columns(float* dst, int64_t dst_cols, int64_t dst_begin, const float* src,
                  int64_t src_cols, int64_t src_begin, int64_t width, int64_t rows, bool add);

// Mixture of experts (ops.h): rows[i] = scale[i] * inp[index[i]] (scale null: 1), i < n;
// out = 0 over out_rows rows, then out[index[i]] += scale[i] * rows[i]; dots[i] = <a[index[i]],
// b[i]>.
void gather_rows(float* rows, const float* inp, const int32_t* index, const float* scale, int64_t n,
                 int64_t c);
void combine_rows(float* out, int64_t out_rows, const float* rows, const int32_t* index,
                  const float* scale, int64_t n, int64_t c);
void gathered_row_dots(float* dots, const float* a, const int32_t* index, const float* b, int64_t n,
                       int64_t c);

// out[b,t,:] = wte[token] + wpe[t]
MGPU_VECTOR_CLONES_DECL void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                               const float* wpe, int64_t b, int64_t t, int64_t c);
MGPU_VECTOR_CLONES_DECL void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                                const int32_t* tokens, int64_t b, int64_t t,
                                                int64_t c);

// Mean cross-entropy over n rows of logits [n,v]; writes dlogits = grad_scale * dloss/dlogits
// (dlogits may alias logits). Returns the mean loss.
MGPU_VECTOR_CLONES_DECL float cross_entropy_forward_backward(float* dlogits, const float* logits,
                                                             const int32_t* targets, int64_t n,
                                                             int64_t v, float grad_scale);
MGPU_VECTOR_CLONES_DECL float cross_entropy_loss(const float* logits, const int32_t* targets,
                                                 int64_t n, int64_t v);
// The vocabulary-parallel cross-entropy's halves (ops::vocab_parallel_ce_*): logits [n, v] are
// the columns [v0, v0 + v) of the whole vocabulary; stats [3, n]; all_stats [parts, 3, n].
MGPU_VECTOR_CLONES_DECL void vocab_parallel_ce_stats(float* stats, const float* logits,
                                                     const int32_t* targets, int64_t n, int64_t v,
                                                     int64_t v0);
MGPU_VECTOR_CLONES_DECL float vocab_parallel_ce_forward_backward(
    float* dlogits, const float* logits, const float* all_stats, const int32_t* targets, int64_t n,
    int64_t v, int64_t v0, int64_t parts, float grad_scale);

}  // namespace mgpu::cpu

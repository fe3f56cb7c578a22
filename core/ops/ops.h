// One dispatch point per op. Every function here:
//   1. opens a KernelScope with the op's FLOPs and bytes (the modeled clock turns them into time,
//      the enclosing ComputeScope collects them);
//   2. stops there on the phantom device (shapes only, no data: the cost is all we want);
//   3. runs the CPU kernel (core/ops/cpu/kernels.h) or the CUDA one (core/ops/cuda_table.h).
//
// Conventions (same as the kernels):
//  - Tensors are contiguous; "rows" means all leading dims flattened, "C" the last dim.
//  - Mixed precision: any tensor may be f32, bf16 or f16 (mixed freely). Kernels compute in fp32
//    and round each stored element to its tensor's type (bf16/f16 are CPU-only, emulated exactly).
//  - Activation gradients (dinp, dqkv, dlogits, ...) are OVERWRITTEN; parameter gradients
//    (dweight, dbias, dwte, dwpe) are ACCUMULATED (+=) so micro-batches can add up.
//  - Linear weights are [out_features, in_features] (PyTorch / llm.c layout): y = x @ W^T + b.
//  - Token ids / targets are host int32 spans of length rows (B*T), row-major [B, T].
#pragma once
#include <cstdint>
#include <span>

#include "core/tensor/tensor.h"

namespace mgpu::ops {

// out[M,N] = op(a) @ op(b) + beta * out, with op(x) = x^T when trans_x. a and b are viewed as
// 2-D (leading dims flattened): a is [M,K] ([K,M] if trans_a), b is [K,N] ([N,K] if trans_b).
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a = false,
            bool trans_b = false, float beta = 0.0f);

// Linear layer: out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC] (bias may be undefined).
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
// dinp = dout @ weight (overwritten); dweight += dout^T @ inp; dbias += colsum(dout) if defined.
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);

void bias_add(Tensor& out, const Tensor& bias);           // out[n,:] += bias
void bias_grad(Tensor& dbias, const Tensor& dout);        // dbias += column sums of dout
void add(Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b (residual add)
void axpy(Tensor& y, float alpha, const Tensor& x);       // y += alpha * x
void scale(Tensor& x, float alpha);                       // x *= alpha
// dst = src converted to dst's dtype (rounded to nearest even; fp16 overflows to inf), any dtypes.
void convert(Tensor& dst, const Tensor& src);
// Number of inf/NaN elements of x (the loss scaler's overflow check).
int64_t count_nonfinite(const Tensor& x);

void gelu_forward(Tensor& out, const Tensor& inp);  // tanh approximation
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);

// Affine layernorm over the last dim, eps 1e-5; saves mean and rstd ([rows] each) for backward.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias);
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

void softmax_forward(Tensor& out, const Tensor& inp);  // over the last dim
void softmax_backward(Tensor& dinp, const Tensor& out, const Tensor& dout);

// RMSNorm over the last dim (Zhang & Sennrich 2019), eps 1e-5: out = inp * rstd * weight with
// rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd ([rows], f32) for the backward.
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight);
// dinp overwritten; dweight ACCUMULATES (+=), like layernorm_backward's.
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

// SwiGLU (Shazeer 2020): gate_up [N, 2F] holds gate | up (gate in columns [0,F), up in [F,2F));
// out [N, F] = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
void swiglu_forward(Tensor& out, const Tensor& gate_up);
void swiglu_backward(Tensor& dgate_up, const Tensor& gate_up, const Tensor& dout);  // overwritten

// Rotary positions (RoPE, Su et al. 2021), in place on x [B, T, heads * D] (D = head size, even):
// within each head, the pair (2i, 2i+1) of token t is rotated by the angle
// positions[t] * theta^(-2i/D) (Meta's interleaved pairs). positions has T entries: each token's
// GLOBAL position (context parallelism passes its chunk's). The backward rotates by -angle.
void rope_forward(Tensor& x, std::span<const int32_t> positions, int heads, float theta);
void rope_backward(Tensor& dx, std::span<const int32_t> positions, int heads, float theta);
// The same on the first heads * head_size columns of each row of x [B, T, W] (the rest of the
// row untouched): the block rotates q and k in place inside qkv [B, T, (H + 2 KV) D].
void rope_forward(Tensor& x, std::span<const int32_t> positions, int heads, int64_t head_size,
                  float theta);
void rope_backward(Tensor& dx, std::span<const int32_t> positions, int heads, int64_t head_size,
                   float theta);

// Causal multi-head self-attention. qkv [B,T,3C] (q | k | v) -> out [B,T,C]; att [B,H,T,T]
// receives the attention probabilities (zero above the diagonal) for the backward pass.
// The same as the grouped-query overload below with kv_heads = heads (bit for bit).
void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads);
// Grouped-query attention (Ainslie et al. 2023): qkv [B, T, (heads + 2 kv_heads) * D] holds
// q (heads*D) | k (kv_heads*D) | v (kv_heads*D); query head h reads kv head h / (heads/kv_heads).
// kv_heads == heads is exactly the multi-head attention above. out [B,T,heads*D],
// att [B,heads,T,T]. The backward sums each kv head's gradient over its query group.
void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads, int kv_heads);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads, int kv_heads);

// Ring attention, one block of keys at a time (context parallelism). q [B,Tq,H*D] are a rank's
// queries, kv [B,Tk,2*KV*D] one block of keys and values (k | v; KV = kv_heads, grouped-query
// attention: query head h reads kv head h / (H/KV)); key j is visible to query i when
// kv_pos[j] <= q_pos[i] (global token positions, each list ascending). Forward writes the block's
// own attention output out [B,Tq,H*D], its log-sum-exp lse [B,H,Tq] (f32; -inf for a query that
// sees no key here) and the scaled scores into column kv_pos[j] of att [B,H,Tq,T] (the rank's
// rows of the full T x T score matrix; -inf where masked). Only visible pairs are computed.
// Without kv_heads: multi-head (kv_heads = heads, bit for bit).
void attention_block_forward(Tensor& out, Tensor& lse, Tensor& att, const Tensor& q,
                             const Tensor& kv, std::span<const int32_t> q_pos,
                             std::span<const int32_t> kv_pos, int heads);
void attention_block_forward(Tensor& out, Tensor& lse, Tensor& att, const Tensor& q,
                             const Tensor& kv, std::span<const int32_t> q_pos,
                             std::span<const int32_t> kv_pos, int heads, int kv_heads);
// The block's share of the gradients given the MERGED out and lse: probabilities are
// exp(score - lse). dq [B,Tq,H*D] and dkv [B,Tk,2*KV*D] ACCUMULATE (a query block meets every
// block); each kv head's dK|dV sums over its query group.
void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& out,
                              const Tensor& q, const Tensor& kv, const Tensor& att,
                              const Tensor& lse, std::span<const int32_t> q_pos,
                              std::span<const int32_t> kv_pos, int heads);
void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& out,
                              const Tensor& q, const Tensor& kv, const Tensor& att,
                              const Tensor& lse, std::span<const int32_t> q_pos,
                              std::span<const int32_t> kv_pos, int heads, int kv_heads);
// The online-softmax merge of two partial attention results over disjoint key sets (exercise
// 07's reference): out [B,T,C], lse [B,H,T] become the result over both key sets.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse);
// dst[r, dst_col + i] = src[r, src_col + i] (+= with add) for i < width: both viewed as
// [rows, cols] with the same number of rows (packs k | v out of qkv, and back).
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t width,
                  bool add = false);

// A mixture of experts' permutation and combine (rows: all leading dims flattened, index and
// scale host spans of one entry per row of `rows`; scale empty: 1):
//   gather_rows:  rows[i] = scale[i] * inp[index[i]]                 (dispatch; combine backward)
//   combine_rows: out = 0, then out[index[i]] += scale[i] * rows[i]  (combine; dispatch backward)
//   gathered_row_dots: dots[i] = <a[index[i]], b[i]>                 (the combine's weight grad)
void gather_rows(Tensor& rows, const Tensor& inp, std::span<const int32_t> index,
                 std::span<const float> scale = {});
void combine_rows(Tensor& out, const Tensor& rows, std::span<const int32_t> index,
                  std::span<const float> scale = {});
void gathered_row_dots(std::span<float> dots, const Tensor& a, std::span<const int32_t> index,
                       const Tensor& b);

// out[B,T,C] = wte[tokens[b,t]] + wpe[t]; tokens has B*T ids in [0, vocab).
void embedding_forward(Tensor& out, std::span<const int32_t> tokens, const Tensor& wte,
                       const Tensor& wpe);
// Scatter-add of dout into dwte (rows of the tokens used) and dwpe (rows 0..T-1).
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                        std::span<const int32_t> tokens);

// Fused softmax + negative log-likelihood, mean over rows of logits [rows, V]. Writes
// dlogits = grad_scale * d(mean loss)/d logits (dlogits may be logits itself) and returns the
// mean loss; grad_scale is e.g. 1/micro_batches for gradient accumulation. Phantom: returns 0.
float cross_entropy_forward_backward(Tensor& dlogits, const Tensor& logits,
                                     std::span<const int32_t> targets, float grad_scale = 1.0f);
float cross_entropy_loss(const Tensor& logits, std::span<const int32_t> targets);

// The vocabulary-parallel cross-entropy's two local halves (core/parallel/vocab_parallel.h): a
// rank holds logits [rows, V/t], the columns [vocab_begin, vocab_begin + V/t) of the whole
// vocabulary's. stats [3, rows] (f32) gets per row: the local max m, the local sum of exp(x - m),
// and the target's logit where this rank owns the target (else 0). From every rank's stats
// (all_stats [t, 3, rows], rank-major) the second half forms each row's global log-sum-exp,
// writes dlogits = grad_scale * d(mean loss)/d logits on the local columns (softmax - onehot,
// dlogits may be logits itself) and returns the mean loss (the same on every rank). Phantom: 0.
void vocab_parallel_ce_stats(Tensor& stats, const Tensor& logits, std::span<const int32_t> targets,
                             int64_t vocab_begin);
float vocab_parallel_ce_forward_backward(Tensor& dlogits, const Tensor& logits,
                                         const Tensor& all_stats, std::span<const int32_t> targets,
                                         int64_t vocab_begin, float grad_scale = 1.0f);

}  // namespace mgpu::ops

// Ulysses, context parallelism's all-to-all attention (see context_parallel.h for the idea):
//   forward:  all-to-all from my tokens of every head to the whole sequence of my heads, plain
//             causal attention on those, all-to-all back;
//   backward: the same re-sharding around attention's backward.
#include "core/ops/ops.h"
#include "core/parallel/context_parallel.h"

namespace mgpu::parallel {

// [B, T/cp, parts*C] by sequence -> [B, T, parts*C/cp] by heads: block d of the all-to-all's input
// holds my tokens' channels of rank d's heads; block s of its output, rank s's tokens of mine.
Tensor UlyssesAttention::to_heads(const Tensor& by_sequence, int parts,
                                  const std::string& category) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1);
  const int64_t c = by_sequence.dim(2) / parts, cd = c / cp, block = b * t * parts * cd;
  Tensor send = scratch({cp * block}, by_sequence.dtype());
  Tensor recv = scratch({cp * block}, by_sequence.dtype());
  Tensor by_heads = scratch({b, t * cp, parts * cd}, by_sequence.dtype());
  {
    ComputeScope s({.name = "ulysses: pack heads", .cat = category});
    const Tensor rows = by_sequence.reshape({b * t, parts * c});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b * t, parts * cd});
      for (int p = 0; p < parts; ++p) ops::copy_columns(to_d, p * cd, rows, p * c + d * cd, cd);
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack sequence", .cat = category});
  Tensor whole = by_heads.reshape({b, t * cp * parts * cd});
  for (int src = 0; src < cp; ++src) {
    const Tensor from = recv.flat_range(src * block, (src + 1) * block).reshape({b, block / b});
    ops::copy_columns(whole, src * (block / b), from, 0, block / b);
  }
  return by_heads;
}

// The inverse: [B, T, parts*C/cp] by heads -> [B, T/cp, parts*C] by sequence.
void UlyssesAttention::to_sequence(Tensor& by_sequence, const Tensor& by_heads, int parts,
                                   const std::string& category) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1);
  const int64_t c = by_sequence.dim(2) / parts, cd = c / cp, block = b * t * parts * cd;
  Tensor send = scratch({cp * block}, by_heads.dtype());
  Tensor recv = scratch({cp * block}, by_heads.dtype());
  {
    ComputeScope s({.name = "ulysses: pack sequence", .cat = category});
    const Tensor whole = by_heads.reshape({b, t * cp * parts * cd});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b, block / b});
      ops::copy_columns(to_d, 0, whole, d * (block / b), block / b);
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack heads", .cat = category});
  Tensor rows = by_sequence.reshape({b * t, parts * c});
  for (int src = 0; src < cp; ++src) {
    const Tensor from =
        recv.flat_range(src * block, (src + 1) * block).reshape({b * t, parts * cd});
    for (int p = 0; p < parts; ++p) ops::copy_columns(rows, p * c + src * cd, from, p * cd, cd);
  }
}

void UlyssesAttention::forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
                               const AttentionHeads& attention_heads, const std::string& category) {
  const int heads = multi_head_only(attention_heads, "Ulysses");
  (void)lse;  // plain attention on whole sequences keeps the probabilities themselves
  const int cp = cp_.size();
  const Tensor qkv_heads = to_heads(qkv, 3, category);  // whole sequences, heads/cp heads
  Tensor out_heads =
      scratch({qkv_heads.dim(0), qkv_heads.dim(1), qkv_heads.dim(2) / 3}, qkv.dtype());
  Tensor att_heads =
      att.reshape({qkv.dim(0), heads / cp, seq_, seq_});  // same size as [B,H,T/cp,T]
  {
    ComputeScope s({.name = "ulysses attention", .cat = category});
    ops::attention_forward(out_heads, att_heads, qkv_heads, heads / cp);
  }
  to_sequence(out, out_heads, 1, category);
}

// Backward re-shards qkv rather than keeping the head-sharded copy (one more all-to-all instead
// of another [B, T, 3C/cp] activation per layer).
void UlyssesAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& att, const Tensor& lse,
                                const AttentionHeads& attention_heads,
                                const std::string& category) {
  const int heads = multi_head_only(attention_heads, "Ulysses");
  (void)out, (void)lse;
  const int cp = cp_.size();
  const Tensor qkv_heads = to_heads(qkv, 3, category);
  const Tensor dout_heads = to_heads(dout, 1, category);
  Tensor dqkv_heads = scratch(qkv_heads.shape(), qkv.dtype());
  const Tensor att_heads = att.reshape({qkv.dim(0), heads / cp, seq_, seq_});
  {
    ComputeScope s({.name = "ulysses attention", .cat = category});
    ops::attention_backward(dqkv_heads, dout_heads, qkv_heads, att_heads, heads / cp);
  }
  to_sequence(dqkv, dqkv_heads, 3, category);
}

}  // namespace mgpu::parallel

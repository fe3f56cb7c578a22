// Ulysses, context parallelism's all-to-all attention (see context_parallel.h for the idea):
//   forward:  all-to-all from my tokens of every head to the whole sequence of my heads, plain
//             causal attention on those, all-to-all back;
//   backward: the same re-sharding around attention's backward.
// Grouped-query attention: q (H heads), k and v (KV heads each) are split over the ranks part by
// part, so rank d receives query heads d*H/cp.. and the kv heads they read. When KV < cp a rank's
// query heads read less than one kv head's share: each kv head is first copied cp/KV times
// (spread_kv), every rank receives the copy its group reads, and after the backward all-to-all
// the copies' gradients are summed into their kv head (fold_kv). The copies cost all-to-all bytes
// (k and v as wide as cp heads instead of KV) but run every cp that is a multiple of KV, which
// llama-style models with few kv heads need; ring attention sends only the KV heads.
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/ops/ops.h"
#include "core/parallel/context_parallel.h"

namespace mgpu::parallel {

int ulysses_kv_heads(int kv_heads, int cp) {
  if (kv_heads % cp == 0) return kv_heads;
  if (cp % kv_heads == 0) return cp;
  return 0;
}

namespace {

// The heads of one rank's attention and qkv's parts as the all-to-all splits them.
struct UlyssesHeads {
  int64_t head_size;
  int heads;           // the model's query heads (H)
  int kv_heads;        // the model's kv heads (KV)
  int spread_heads;    // kv heads after the copies (ulysses_kv_heads: KV, or cp when KV < cp)
  int local_heads;     // query heads per rank: H / cp
  int local_kv_heads;  // kv heads per rank: spread_heads / cp
  // The parts the all-to-all splits, whole (by sequence): q | k | v, k and v after the copies.
  std::vector<int64_t> qkv_widths() const {
    const int64_t q = int64_t{heads} * head_size, kv = int64_t{spread_heads} * head_size;
    return {q, kv, kv};
  }
};

UlyssesHeads ulysses_heads(const Tensor& qkv, const AttentionHeads& h, int cp) {
  const int spread = ulysses_kv_heads(h.kv_heads, cp);
  if (h.heads % cp != 0 || spread == 0)
    throw std::invalid_argument(fmt::format(
        "ulysses splits {} heads and {} kv heads over {} ranks: cp must divide the heads and "
        "divide or be a multiple of the kv heads",
        h.heads, h.kv_heads, cp));
  const int64_t hs = qkv.dim(2) / (h.heads + 2 * int64_t{h.kv_heads});
  return {hs, h.heads, h.kv_heads, spread, h.heads / cp, spread / cp};
}

// [B, T/cp, (H + 2 KV) D] -> [B, T/cp, (H + 2 E) D]: every kv head of k and of v copied E/KV
// times in place (copy c of kv head g is spread head g * E/KV + c). E = KV: qkv itself.
Tensor spread_kv(const Tensor& qkv, const UlyssesHeads& u, const std::string& category) {
  if (u.spread_heads == u.kv_heads) return qkv;
  const int64_t d = u.head_size, q = u.heads * d, copies = u.spread_heads / u.kv_heads;
  Tensor spread = scratch({qkv.dim(0), qkv.dim(1), q + 2 * u.spread_heads * d}, qkv.dtype());
  ComputeScope s({.name = "ulysses: copy kv heads", .cat = category});
  ops::copy_columns(spread, 0, qkv, 0, q);
  for (int part = 0; part < 2; ++part)  // k, then v
    for (int64_t g = 0; g < u.kv_heads; ++g)
      for (int64_t c = 0; c < copies; ++c)
        ops::copy_columns(spread, q + (part * u.spread_heads + g * copies + c) * d, qkv,
                          q + (part * u.kv_heads + g) * d, d);
  return spread;
}

// The inverse's gradient: dqkv's q part copied, each kv head's dk and dv the sum of its copies'.
void fold_kv(Tensor& dqkv, const Tensor& spread, const UlyssesHeads& u,
             const std::string& category) {
  const int64_t d = u.head_size, q = u.heads * d, copies = u.spread_heads / u.kv_heads;
  ComputeScope s({.name = "ulysses: sum kv head copies", .cat = category});
  ops::copy_columns(dqkv, 0, spread, 0, q);
  for (int part = 0; part < 2; ++part)
    for (int64_t g = 0; g < u.kv_heads; ++g)
      for (int64_t c = 0; c < copies; ++c)
        ops::copy_columns(dqkv, q + (part * u.kv_heads + g) * d, spread,
                          q + (part * u.spread_heads + g * copies + c) * d, d, /*add=*/c > 0);
}

int64_t sum(const std::vector<int64_t>& widths) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  return total;
}

}  // namespace

// [B, T/cp, sum(widths)] by sequence -> [B, T, sum(widths)/cp] by heads: block d of the
// all-to-all's input holds my tokens' channels of rank d's heads (slice d of every part); block s
// of its output, rank s's tokens of mine.
Tensor UlyssesAttention::to_heads(const Tensor& by_sequence, const std::vector<int64_t>& widths,
                                  const std::string& category) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1), row = sum(widths) / cp;
  const int64_t block = b * t * row;
  Tensor send = scratch({cp * block}, by_sequence.dtype());
  Tensor recv = scratch({cp * block}, by_sequence.dtype());
  Tensor by_heads = scratch({b, t * cp, row}, by_sequence.dtype());
  {
    ComputeScope s({.name = "ulysses: pack heads", .cat = category});
    const Tensor rows = by_sequence.reshape({b * t, sum(widths)});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b * t, row});
      for (int64_t p = 0, at = 0, to = 0; p < int64_t(widths.size()); at += widths[p++]) {
        const int64_t slice = widths[p] / cp;
        ops::copy_columns(to_d, to, rows, at + d * slice, slice);
        to += slice;
      }
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack sequence", .cat = category});
  Tensor whole = by_heads.reshape({b, t * cp * row});
  for (int src = 0; src < cp; ++src) {
    const Tensor from = recv.flat_range(src * block, (src + 1) * block).reshape({b, block / b});
    ops::copy_columns(whole, src * (block / b), from, 0, block / b);
  }
  return by_heads;
}

// The inverse: [B, T, sum(widths)/cp] by heads -> [B, T/cp, sum(widths)] by sequence.
void UlyssesAttention::to_sequence(Tensor& by_sequence, const Tensor& by_heads,
                                   const std::vector<int64_t>& widths,
                                   const std::string& category) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1), row = sum(widths) / cp;
  const int64_t block = b * t * row;
  Tensor send = scratch({cp * block}, by_heads.dtype());
  Tensor recv = scratch({cp * block}, by_heads.dtype());
  {
    ComputeScope s({.name = "ulysses: pack sequence", .cat = category});
    const Tensor whole = by_heads.reshape({b, t * cp * row});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b, block / b});
      ops::copy_columns(to_d, 0, whole, d * (block / b), block / b);
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack heads", .cat = category});
  Tensor rows = by_sequence.reshape({b * t, sum(widths)});
  for (int src = 0; src < cp; ++src) {
    const Tensor from = recv.flat_range(src * block, (src + 1) * block).reshape({b * t, row});
    for (int64_t p = 0, at = 0, from_at = 0; p < int64_t(widths.size()); at += widths[p++]) {
      const int64_t slice = widths[p] / cp;
      ops::copy_columns(rows, at + src * slice, from, from_at, slice);
      from_at += slice;
    }
  }
}

void UlyssesAttention::forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
                               const AttentionHeads& h, const std::string& category) {
  (void)lse;  // plain attention on whole sequences keeps the probabilities themselves
  const int cp = cp_.size();
  const UlyssesHeads u = ulysses_heads(qkv, h, cp);
  const std::vector<int64_t> widths = u.qkv_widths();
  // whole sequences of H/cp query heads and the kv heads they read
  const Tensor qkv_heads = to_heads(spread_kv(qkv, u, category), widths, category);
  Tensor out_heads = scratch({qkv_heads.dim(0), qkv_heads.dim(1), widths[0] / cp}, qkv.dtype());
  Tensor att_heads = att.reshape({qkv.dim(0), u.local_heads, seq_, seq_});  // = [B,H,T/cp,T]
  {
    ComputeScope s({.name = "ulysses attention", .cat = category});
    ops::attention_forward(out_heads, att_heads, qkv_heads, u.local_heads, u.local_kv_heads);
  }
  to_sequence(out, out_heads, {widths[0]}, category);
}

// Backward re-shards qkv rather than keeping the head-sharded copy (one more all-to-all instead
// of another [B, T, (H + 2 KV) D / cp] activation per layer).
void UlyssesAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& att, const Tensor& lse,
                                const AttentionHeads& h, const std::string& category) {
  (void)out, (void)lse;
  const int cp = cp_.size();
  const UlyssesHeads u = ulysses_heads(qkv, h, cp);
  const std::vector<int64_t> widths = u.qkv_widths();
  const Tensor qkv_heads = to_heads(spread_kv(qkv, u, category), widths, category);
  const Tensor dout_heads = to_heads(dout, {widths[0]}, category);
  Tensor dqkv_heads = scratch(qkv_heads.shape(), qkv.dtype());
  const Tensor att_heads = att.reshape({qkv.dim(0), u.local_heads, seq_, seq_});
  {
    ComputeScope s({.name = "ulysses attention", .cat = category});
    ops::attention_backward(dqkv_heads, dout_heads, qkv_heads, att_heads, u.local_heads,
                            u.local_kv_heads);
  }
  if (u.spread_heads == u.kv_heads) {
    to_sequence(dqkv, dqkv_heads, widths, category);
    return;
  }
  Tensor spread = scratch({dqkv.dim(0), dqkv.dim(1), sum(widths)}, dqkv.dtype());
  to_sequence(spread, dqkv_heads, widths, category);
  fold_kv(dqkv, spread, u, category);
}

}  // namespace mgpu::parallel

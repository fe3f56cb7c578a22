// Attention: causal self-attention over a whole sequence (multi-head or grouped-query), rotary
// positions for its q and k, and ring attention's block-at-a-time forward, backward and merge
// (context parallelism). Priced as GEMMs plus passes over the scores.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <string>

#include "core/ops/cpu/kernels.h"
#include "core/ops/ops_internal.h"
#include "core/runtime/context.h"

namespace mgpu::ops {

namespace {
struct AttentionDims {
  int64_t b, t, c, heads, kv_heads, qkv_cols;  // c = heads * hs: q's (and out's) width
  // (query, key) pairs the kernels compute: heads * B * T * T. The CPU kernels run the scores
  // as full T x T GEMMs and then mask, so we count the masked half too.
  double pairs() const { return double(b) * heads * t * t; }
  // Priced as batch x heads GEMMs of [T, hs] x [hs, T] plus `passes` over the scores.
  KernelCost cost(double bytes, double flops, double score_bytes, int passes, DType dtype) const {
    return {.kind = KernelKind::attention,
            .flops = flops,
            .bytes = bytes,
            .dtype = dtype,
            .m = double(t),
            .n = double(t),
            .k = double(c / heads),
            .batch = double(b * heads),
            .score_bytes = score_bytes,
            .score_passes = passes};
  }
};
AttentionDims attention_dims(const char* op, const Tensor& qkv, const Tensor& att, int heads,
                             int kv_heads) {
  check(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, op,
        fmt::format("kv_heads ({}) must divide heads ({})", kv_heads, heads));
  const int64_t parts = heads + 2 * int64_t{kv_heads};  // head-size slices per token of qkv
  check(qkv.ndim() == 3 && qkv.dim(2) % parts == 0, op,
        fmt::format("qkv must be [B, T, (heads + 2 kv_heads) * D] with heads {} and kv_heads {}, "
                    "got {}",
                    heads, kv_heads, shape_str(qkv.shape())));
  const int64_t hs = qkv.dim(2) / parts;
  AttentionDims d{qkv.dim(0), qkv.dim(1), heads * hs, heads, kv_heads, qkv.dim(2)};
  check(att.numel() == d.b * heads * d.t * d.t, op,
        fmt::format("att must be [B, H, T, T] = [{}, {}, {}, {}]", d.b, heads, d.t, d.t));
  return d;
}
}  // namespace

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads) {
  attention_forward(out, att, qkv, heads, heads);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads) {
  attention_backward(dqkv, dout, qkv, att, heads, heads);
}

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads, int kv_heads) {
  const double kF = elem_bytes(qkv);
  const DType kT = qkv.dtype();
  const AttentionDims d = attention_dims("attention_forward", qkv, att, heads, kv_heads);
  check(out.numel() == d.b * d.t * d.c, "attention_forward", "out must be [B, T, heads * D]");
  const double hs = double(d.c / heads);
  // per pair: q.k (2 hs), softmax (~5), att * v (2 hs). Materialised, the scores make 4 passes
  // through memory: S = QK^T written, read and P written by softmax, P read by P V. Reads qkv,
  // writes out (4C a token for multi-head attention).
  KernelScope ks("attention_forward",
                 d.cost(kF * (d.b * d.t * double(d.qkv_cols + d.c) + double(att.numel())),
                        d.pairs() * (4.0 * hs + 5.0), kF * double(att.numel()), 4, kT));
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_forward", cpu::attention_forward, &CudaKernels::attention_forward,
      st.out(out), st.out(att), st.in(qkv), d.b, d.t, d.c, d.heads, d.kv_heads);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads, int kv_heads) {
  const double kF = elem_bytes(qkv);
  const DType kT = qkv.dtype();
  const AttentionDims d = attention_dims("attention_backward", qkv, att, heads, kv_heads);
  check(dqkv.numel() == qkv.numel() && dout.numel() == d.b * d.t * d.c, "attention_backward",
        "dqkv must match qkv and dout must be [B, T, heads * D]");
  const double hs = double(d.c / heads);
  // per pair: dP (2 hs), dV (2 hs), softmax backward (~4), dQ and dK (4 hs). Materialised, 7
  // passes over the scores: P read by the dV GEMM, dP written, P and dP read and dS written by
  // softmax's backward, dS read by the dQ GEMM and by the dK GEMM. Reads qkv and dout, writes
  // dqkv (7C a token for multi-head attention).
  KernelScope ks("attention_backward",
                 d.cost(kF * (d.b * d.t * double(2 * d.qkv_cols + d.c) + double(att.numel())),
                        d.pairs() * (8.0 * hs + 4.0), kF * double(att.numel()), 7, kT));
  if (!has_math(dqkv)) return;
  Fp32Staging st;
  run(dqkv, "attention_backward", cpu::attention_backward, &CudaKernels::attention_backward,
      st.out(dqkv), st.in(dout), st.in(qkv), st.in(att), d.b, d.t, d.c, d.heads, d.kv_heads);
}

// ---- rotary positions (RoPE), applied to q and k before attention

namespace {
// The first heads * D columns of each row of x [B, T, W], D even, one position per token.
void check_rope(const char* op, const Tensor& x, std::span<const int32_t> positions, int heads,
                int64_t hs) {
  check(x.ndim() == 3 && heads > 0 && hs > 0 && hs % 2 == 0 && heads * hs <= x.dim(2), op,
        fmt::format("x must be [B, T, W] with heads {} x D {} (D even) <= W, got {}", heads, hs,
                    shape_str(x.shape())));
  check(int64_t(positions.size()) == x.dim(1), op,
        fmt::format("{} positions for T = {}: one per token", positions.size(), x.dim(1)));
}

// Per pair: 4 products and 2 adds (the angles' sines and cosines are not counted: a GPU kernel
// would read them from a table). Reads and writes the rotated columns of x.
void rope(const char* op, Tensor& x, std::span<const int32_t> positions, int heads, int64_t hs,
          float theta, decltype(cpu::rope_forward) cpu_kernel,
          decltype(&CudaKernels::rope_forward) cuda_entry) {
  check_rope(op, x, positions, heads, hs);
  const double rotated = double(x.dim(0)) * double(x.dim(1)) * double(heads * hs);
  KernelScope ks(op, 3.0 * rotated, elem_bytes(x) * 2.0 * rotated + 4.0 * double(positions.size()),
                 x.dtype());
  if (!has_math(x)) return;
  Fp32Staging st;
  run(x, op, cpu_kernel, cuda_entry, st.out(x), positions.data(), x.dim(0), x.dim(1),
      int64_t{heads}, hs, x.dim(2), theta);
}
int64_t whole_rows(const Tensor& x, int heads) {
  return heads > 0 && x.ndim() == 3 && x.dim(2) % heads == 0 ? x.dim(2) / heads : 0;
}
}  // namespace

void rope_forward(Tensor& x, std::span<const int32_t> positions, int heads, float theta) {
  rope_forward(x, positions, heads, whole_rows(x, heads), theta);
}

void rope_backward(Tensor& dx, std::span<const int32_t> positions, int heads, float theta) {
  rope_backward(dx, positions, heads, whole_rows(dx, heads), theta);
}

void rope_forward(Tensor& x, std::span<const int32_t> positions, int heads, int64_t head_size,
                  float theta) {
  rope("rope_forward", x, positions, heads, head_size, theta, cpu::rope_forward,
       &CudaKernels::rope_forward);
}

void rope_backward(Tensor& dx, std::span<const int32_t> positions, int heads, int64_t head_size,
                   float theta) {
  rope("rope_backward", dx, positions, heads, head_size, theta, cpu::rope_backward,
       &CudaKernels::rope_backward);
}

// ---- ring attention (context parallelism): one block of keys at a time

namespace {
struct BlockDims {
  int64_t b, tq, tk, c, heads, kv_heads, att_cols;  // c = heads * hs: q's (and out's) width
  double visible_pairs;  // (query, key) pairs the mask lets through, over every batch row and head
  // Priced as batch x heads GEMMs of [Tq, hs] x [hs, Tk] plus `passes` over the visible scores.
  KernelCost cost(double bytes, double flops, double score_bytes, int passes, DType dtype) const {
    return {.kind = KernelKind::attention,
            .flops = flops,
            .bytes = bytes,
            .dtype = dtype,
            .m = double(tq),
            .n = double(tk),
            .k = double(c / heads),
            .batch = double(b * heads),
            .score_bytes = score_bytes,
            .score_passes = passes};
  }
};
// Keys at or before each query (both ascending), over every batch row and head: one merge-like
// walk, not a search per query.
double visible_pairs(std::span<const int32_t> q_pos, std::span<const int32_t> kv_pos,
                     int64_t rows) {
  double per_row = 0;
  size_t visible = 0;
  for (int32_t p : q_pos) {
    while (visible < kv_pos.size() && kv_pos[visible] <= p) ++visible;
    per_row += double(visible);
  }
  return per_row * double(rows);
}
BlockDims block_dims(const char* op, const Tensor& q, const Tensor& kv, const Tensor& att,
                     const Tensor& lse, std::span<const int32_t> q_pos,
                     std::span<const int32_t> kv_pos, int heads, int kv_heads) {
  // Messages are formatted only on failure: the planner's simulations call this per block.
  if (!(heads > 0 && kv_heads > 0 && heads % kv_heads == 0))
    check(false, op, fmt::format("kv_heads ({}) must divide heads ({})", kv_heads, heads));
  if (!(q.ndim() == 3 && kv.ndim() == 3 && kv.dim(0) == q.dim(0) && q.dim(2) % heads == 0 &&
        kv.dim(2) == 2 * kv_heads * (q.dim(2) / heads)))
    check(false, op,
          fmt::format("q must be [B, Tq, H*D] and kv [B, Tk, 2*KV*D] with H {} and KV {}, got {} "
                      "and {}",
                      heads, kv_heads, shape_str(q.shape()), shape_str(kv.shape())));
  BlockDims d{q.dim(0), q.dim(1), kv.dim(1), q.dim(2), heads, kv_heads, 0, 0};
  check(int64_t(q_pos.size()) == d.tq && int64_t(kv_pos.size()) == d.tk, op,
        "one position per query and per key");
  check(std::is_sorted(q_pos.begin(), q_pos.end()) && std::is_sorted(kv_pos.begin(), kv_pos.end()),
        op, "positions must be ascending");
  check(lse.numel() == d.b * heads * d.tq && lse.dtype() == DType::f32, op,
        "lse must be f32 [B, H, Tq]");
  check(att.ndim() == 4 && att.numel() == d.b * heads * d.tq * att.dim(3), op,
        "att must be [B, H, Tq, T]");
  d.att_cols = att.dim(3);
  if (!(kv_pos.empty() || (kv_pos.front() >= 0 && kv_pos.back() < d.att_cols)))
    check(false, op, fmt::format("key positions must lie in [0, {})", d.att_cols));
  d.visible_pairs = visible_pairs(q_pos, kv_pos, d.b * heads);
  return d;
}
}  // namespace

void attention_block_forward(Tensor& out, Tensor& lse, Tensor& att, const Tensor& q,
                             const Tensor& kv, std::span<const int32_t> q_pos,
                             std::span<const int32_t> kv_pos, int heads) {
  attention_block_forward(out, lse, att, q, kv, q_pos, kv_pos, heads, heads);
}

void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& out,
                              const Tensor& q, const Tensor& kv, const Tensor& att,
                              const Tensor& lse, std::span<const int32_t> q_pos,
                              std::span<const int32_t> kv_pos, int heads) {
  attention_block_backward(dq, dkv, dout, out, q, kv, att, lse, q_pos, kv_pos, heads, heads);
}

void attention_block_forward(Tensor& out, Tensor& lse, Tensor& att, const Tensor& q,
                             const Tensor& kv, std::span<const int32_t> q_pos,
                             std::span<const int32_t> kv_pos, int heads, int kv_heads) {
  const double kF = elem_bytes(q);
  const BlockDims d =
      block_dims("attention_block_forward", q, kv, att, lse, q_pos, kv_pos, heads, kv_heads);
  check(out.numel() == q.numel(), "attention_block_forward", "out must be [B, Tq, H*D]");
  const double hs = double(d.c / heads);
  // per visible pair: q.k (2 hs), softmax (~5), p * v (2 hs); reads q, k, v, writes out and scores
  // Materialised like attention_forward: 4 passes over the block's visible scores.
  KernelScope ks("attention_block_forward",
                 d.cost(kF * (2.0 * double(q.numel()) + double(kv.numel()) + d.visible_pairs),
                        d.visible_pairs * (4.0 * hs + 5.0), kF * d.visible_pairs, 4, q.dtype()));
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_block_forward", cpu::attention_block_forward,
      &CudaKernels::attention_block_forward, st.out(out), st.out(lse), st.out(att), st.in(q),
      st.in(kv), q_pos.data(), kv_pos.data(), d.b, d.tq, d.tk, d.c, d.heads, d.kv_heads,
      d.att_cols);
}

void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& out,
                              const Tensor& q, const Tensor& kv, const Tensor& att,
                              const Tensor& lse, std::span<const int32_t> q_pos,
                              std::span<const int32_t> kv_pos, int heads, int kv_heads) {
  const double kF = elem_bytes(q);
  const BlockDims d =
      block_dims("attention_block_backward", q, kv, att, lse, q_pos, kv_pos, heads, kv_heads);
  check(dq.numel() == q.numel() && dkv.numel() == kv.numel() && dout.numel() == q.numel() &&
            out.numel() == q.numel(),
        "attention_block_backward", "dq, dout and out must match q, and dkv must match kv");
  const double hs = double(d.c / heads);
  // per visible pair: dP (2 hs), dV (2 hs), dQ (2 hs), dK (2 hs), the softmax terms (~4)
  // Materialised like attention_backward: 7 passes over the block's visible scores.
  KernelScope ks("attention_block_backward",
                 d.cost(kF * (5.0 * double(q.numel()) + 2.0 * double(kv.numel()) + d.visible_pairs),
                        d.visible_pairs * (8.0 * hs + 4.0), kF * d.visible_pairs, 7, q.dtype()));
  if (!has_math(dq)) return;
  Fp32Staging st;
  run(dq, "attention_block_backward", cpu::attention_block_backward,
      &CudaKernels::attention_block_backward, st.out(dq), st.out(dkv), st.in(dout), st.in(out),
      st.in(q), st.in(kv), st.in(att), st.in(lse), q_pos.data(), kv_pos.data(), d.b, d.tq, d.tk,
      d.c, d.heads, d.kv_heads, d.att_cols);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  check(out.ndim() == 3 && lse.ndim() == 3 && lse.dim(0) == out.dim(0) &&
            lse.dim(2) == out.dim(1) && lse.dim(1) > 0 && out.dim(2) % lse.dim(1) == 0,
        "attention_merge",
        fmt::format("out must be [B, T, C] and lse [B, H, T] with H dividing C, got {} and {}",
                    shape_str(out.shape()), shape_str(lse.shape())));
  check(block_out.shape() == out.shape() && block_lse.shape() == lse.shape() &&
            lse.dtype() == DType::f32 && block_lse.dtype() == DType::f32,
        "attention_merge", "the block's out and lse must match out and lse (lse in f32)");
  const int64_t b = out.dim(0), t = out.dim(1), c = out.dim(2), heads = lse.dim(1);
  // per (row, head): a max, two exps and a log; per element: two multiply-adds
  KernelScope ks("attention_merge", 4.0 * double(out.numel()) + 8.0 * double(lse.numel()),
                 elem_bytes(out) * 3.0 * double(out.numel()) + 12.0 * double(lse.numel()),
                 out.dtype());
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_merge", cpu::attention_merge, &CudaKernels::attention_merge, st.out(out),
      st.out(lse), st.in(block_out), st.in(block_lse), b, t, c, heads);
}

}  // namespace mgpu::ops

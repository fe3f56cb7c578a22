// Ring attention, the communication of context parallelism (see context_parallel.h for the
// idea): the K|V blocks go round the cp ring while each rank attends to the block in hand.
//   forward:  cp-1 rotations of K|V; each visible block's partial result is merged into the
//             running one with the online-softmax rule (exercise 07's merge);
//   backward: K|V go round again, and each block's dK|dV travels with it back to its owner.
// Grouped-query attention: qkv is q (H*D) | k (KV*D) | v (KV*D), and only the KV heads' keys and
// values travel: a block is B x T/cp x 2*KV*D, KV/H of multi-head attention's (the point of GQA
// for the ring). Query head h reads kv head h / (H/KV) inside the block ops.
#include <stdexcept>
#include <utility>

#include "core/ops/ops.h"
#include "core/parallel/context_parallel.h"

namespace mgpu::parallel {

namespace {
constexpr int kTagKv = 71, kTagDkv = 72;

// The widths of qkv's parts: q is heads * D, the travelling k|v block 2 * kv_heads * D.
struct QkvWidths {
  int64_t q, kv;
};
QkvWidths qkv_widths(const Tensor& qkv, const AttentionHeads& h) {
  const int64_t d = qkv.dim(2) / (h.heads + 2 * int64_t{h.kv_heads});
  return {h.heads * d, 2 * h.kv_heads * d};
}
}  // namespace

// One pass of the K|V blocks round the ring. At step s this rank holds the block of rank
// (r - s) mod cp: it posts the block's onward send and the next block's receive, runs
// on_block(q, kv, keys) on the block in hand (when some key is visible to some query: the mask
// is by global position), waits for the next block, then runs after_step().
RingAttention::RingAttention(comm::Comm& cp, CpLayout layout, int seq, CpSeams seams)
    : cp_(cp), seams_(std::move(seams)) {
  if (!seams_.merge)
    throw std::logic_error(
        "context-parallel seam 'merge' is missing: pass exercise 07's table (reference::seams().cp "
        "or mine::seams().cp)");
  for (int r = 0; r < cp.size(); ++r) positions_.push_back(cp_positions(seq, cp.size(), r, layout));
}

template <class OnBlock, class AfterStep>
void RingAttention::ring_pass(const Tensor& qkv, const AttentionHeads& heads,
                              const std::string& category, OnBlock&& on_block,
                              AfterStep&& after_step) {
  const int64_t b = qkv.dim(0), t = qkv.dim(1);
  const QkvWidths w = qkv_widths(qkv, heads);
  const int cp = cp_.size(), me = cp_.rank();
  Tensor q = scratch({b, t, w.q}, qkv.dtype());
  Tensor kv = scratch({b, t, w.kv}, qkv.dtype()), kv_next = scratch({b, t, w.kv}, qkv.dtype());
  {
    ComputeScope s({.name = "ring attention: pack q, k|v", .cat = category});
    ops::copy_columns(q, 0, qkv, 0, w.q);
    ops::copy_columns(kv, 0, qkv, w.q, w.kv);
  }
  const std::vector<int32_t>& mine = positions();
  for (int step = 0; step < cp; ++step) {
    const std::vector<int32_t>& keys = positions_[(me - step + cp) % cp];
    comm::Work send, recv;
    if (step + 1 < cp) {  // the next block travels while this one is computed on
      send = cp_.isend(kv, (me + 1) % cp, kTagKv);
      recv = cp_.irecv(kv_next, (me + cp - 1) % cp, kTagKv);
    }
    if (keys.front() <= mine.back()) {
      ComputeScope s({.name = "ring attention", .cat = category});
      on_block(q, kv, keys);
    }
    if (step + 1 < cp) {
      recv.wait();  // receive first: a send may only complete once its receive is posted
      send.wait();
      std::swap(kv, kv_next);
    }
    after_step();
  }
}

// Forward: the first block (my own) starts the running (out, lse); every later one is merged in.
void RingAttention::forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
                            const AttentionHeads& h, const std::string& category) {
  const int heads = h.heads;
  const int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv_widths(qkv, h).q;
  if (!lse.defined()) lse = Tensor::empty({b, heads, t}, MemCategory::activations, DType::f32);
  // The running output and every block's share are merged in fp32 and rounded once at the end
  // (mixed precision), as single-device attention rounds its one fp32 result.
  const bool fp32 = out.dtype() == DType::f32;
  Tensor running = fp32 ? out : scratch({b, t, c});
  Tensor block_out = scratch({b, t, c}), block_lse = scratch({b, heads, t});
  bool first = true;
  ring_pass(
      qkv, h, category,
      [&](const Tensor& q, const Tensor& kv, const std::vector<int32_t>& keys) {
        if (first) {
          ops::attention_block_forward(running, lse, att, q, kv, positions(), keys, heads,
                                       h.kv_heads);
          first = false;
        } else {
          ops::attention_block_forward(block_out, block_lse, att, q, kv, positions(), keys, heads,
                                       h.kv_heads);
          seams_.merge(running, lse, block_out, block_lse);  // exercise 07
        }
      },
      [] {});
  if (!fp32) ops::convert(out, running);
}

// Backward: the K/V blocks go round again, each with a dK/dV accumulator that every rank adds its
// queries' share to; after cp steps and cp hops every accumulator is back with its owner, whole.
void RingAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& att, const Tensor& lse, const AttentionHeads& h,
                             const std::string& category) {
  const int64_t b = qkv.dim(0), t = qkv.dim(1);
  const QkvWidths w = qkv_widths(qkv, h);
  const int cp = cp_.size(), me = cp_.rank();
  // fp32 accumulators (mixed precision too): each block adds its share, rounded once at the end.
  // The dK|dV accumulator that travels the ring is fp32 on the wire for the same reason.
  Tensor dq = scratch({b, t, w.q});
  Tensor dkv = scratch({b, t, w.kv}), dkv_next = scratch({b, t, w.kv});
  ring_pass(
      qkv, h, category,
      [&](const Tensor& q, const Tensor& kv, const std::vector<int32_t>& keys) {
        ops::attention_block_backward(dq, dkv, dout, out, q, kv, att, lse, positions(), keys,
                                      h.heads, h.kv_heads);
      },
      [&] {
        if (cp == 1) return;
        // the accumulator follows its block; the last hop takes it home
        comm::Work send = cp_.isend(dkv, (me + 1) % cp, kTagDkv);
        comm::Work recv = cp_.irecv(dkv_next, (me + cp - 1) % cp, kTagDkv);
        recv.wait();
        send.wait();
        std::swap(dkv, dkv_next);
      });
  ComputeScope s({.name = "ring attention: unpack dq, dk|dv", .cat = category});
  ops::copy_columns(dqkv, 0, dq, 0, w.q);
  ops::copy_columns(dqkv, w.q, dkv, 0, w.kv);
}

}  // namespace mgpu::parallel

// The transformer block, x + attn(ln1(x)) then h + mlp(ln2(h)): the shard of it one rank computes
// (BlockShard), the places a layout communicates inside it (BlockComm), what its forward keeps for
// its backward (BlockActivations), and its forward and backward (whole, or zero-bubble's halves).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/layers.h"
#include "core/model/moe.h"

namespace mgpu {

// The part of a block one rank computes: its attention heads and its MLP hidden units. The
// whole block on one device; a contiguous range of both under tensor parallelism. Under sequence
// parallelism the regions outside the four linears (layernorms, residual adds, the block's input
// and output) also hold only this rank's T/seq_parts tokens; the column linears' LinearComm then
// reads [B,T/seq_parts,C] and writes [B,T,local], the row linears' the reverse.
struct BlockShard {
  int heads = 0;      // attention heads computed here (each of head_size channels)
  int hidden = 0;     // MLP hidden units computed here (ffn_hidden() for the whole block)
  int seq_parts = 1;  // the replicated regions hold T / seq_parts tokens (1: the whole sequence)
  // Keys per query row that BlockActivations::att keeps (its last dim); 0 = the block's own
  // tokens. Context parallelism keeps a rank's rows of the whole sequence's T x T matrix.
  int attention_keys = 0;
  // The MoE layers' experts are split into this many equal parts (ep), of which this rank holds
  // one (which one: its ExpertComm's rank). Experts are never tensor-split: each tp rank holds
  // whole experts (what Megatron calls expert-TP = 1, computed redundantly here).
  int expert_parts = 1;
  // Key/value heads computed here (grouped-query attention: each serves heads / kv_heads query
  // heads, all of them local); 0 = as many as query heads (multi-head attention).
  int kv_heads = 0;
  static BlockShard whole(const GPTConfig& cfg) {
    return {.heads = cfg.heads,
            .hidden = static_cast<int>(cfg.ffn_hidden()),
            .kv_heads = cfg.kv_head_count()};
  }
  int local_kv_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  bool operator==(const BlockShard&) const = default;
};

// The places inside a block where a parallel layout communicates, in two kinds (a null one is
// the one-device op, so the model never names a paradigm):
//   LinearComm    around the four big linears (tensor and sequence parallelism). Column linears
//                 (attn.qkv, mlp.fc) read the block's full-width input and write this shard's
//                 output columns; row linears (attn.proj, mlp.proj) read this shard's columns and
//                 write full-width partial results. TP puts f before a column linear and g after a
//                 row linear; SP puts their all-gather/reduce-scatter halves at the same places.
//   AttentionComm attention itself (context parallelism): the other ranks' K/V come round a ring,
//                 or an all-to-all swaps sequence for heads (Ulysses).
// A comm object holds only its communication: the block opens no trace phase for it; the
// layout's phase (TracePhase, if it gave one) is paused around every call (the linears' kernels
// and the collectives record their own events, so the compute lane shows its waits).
class LinearComm {
 public:
  virtual ~LinearComm() = default;
  virtual void column_forward(const Linear& linear, Tensor& out, const Tensor& inp) = 0;
  virtual void column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                               const Tensor& inp) = 0;
  virtual void row_forward(const Linear& linear, Tensor& out, const Tensor& inp) = 0;
  virtual void row_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                            const Tensor& inp) = 0;
  // Zero-bubble's split backward (B): only a column linear's input gradient, dinp = dout @ W
  // (its weight gradient comes later, in W), completed by column_backward's collective.
  virtual void column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) = 0;
};

// The heads of one attention call: query heads and the key/value heads they share (equal
// without grouped-query attention).
struct AttentionHeads {
  int heads = 1, kv_heads = 1;
};

class AttentionComm {
 public:
  virtual ~AttentionComm() = default;
  // qkv [B,T,(H + 2 KV) D] (q | k | v; KV = H without grouped-query attention) -> out
  // [B,T,H D], keeping in att (and lse, which it may allocate) what backward reads. `category`
  // labels the compute scopes it opens (the phase it runs in).
  virtual void forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
                       const AttentionHeads& heads, const std::string& category) = 0;
  // dqkv overwritten from dout and what forward kept (out: forward's output).
  virtual void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& att, const Tensor& lse, const AttentionHeads& heads,
                        const std::string& category) = 0;
};

class TracePhase;  // core/model/trace_phase.h

// What a block communicates through; every member may be null.
struct BlockComm {
  LinearComm* linear = nullptr;        // null: the plain linears
  AttentionComm* attention = nullptr;  // null: causal attention over the block's own tokens
  TracePhase* phase = nullptr;         // the layout's forward/backward region, paused around comm
  ExpertComm* experts = nullptr;       // null: every expert here, the exchanges are copies
};

// Everything one block's backward needs, kept from its forward (MemCategory::activations).
struct BlockActivations {
  Tensor input;                    // [B,T,C] the block's input (a view, not a copy)
  Tensor ln1, ln1_mean, ln1_rstd;  // [B,T,C], [B,T], [B,T] (rmsnorm: no mean)
  Tensor qkv;                      // [B,T,(H+2KV)D] q | k | v of local heads; q, k rotated (rope)
  Tensor att;                      // [B,H,T,T] attention probabilities (H: local heads)
  Tensor lse;                      // [B,H,T] f32 log-sum-exp per query (ring attention only)
  Tensor attn_out;                 // [B,T,C] heads' outputs, before the projection (local heads)
  Tensor res1;                     // [B,T,C] input + attention branch
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor fc;                       // [B,T,F] before GELU (local hidden units; swiglu: [B,T,2F])
  Tensor fc_gelu;                  // [B,T,F] after GELU (or SwiGLU's silu(gate) * up)
  Tensor out;                      // [B,T,C] res1 + MLP branch: the block's output
  MoeActivations moe;              // an MoE block's MLP branch (fc and fc_gelu stay undefined)

  // Allocates what cfg.recompute keeps across forward and backward (the rest is allocated
  // transiently by Block::forward/backward).
  static BlockActivations allocate(const GPTConfig& cfg, int64_t batch, int64_t seq);
  static BlockActivations allocate(const GPTConfig& cfg, const BlockShard& shard, int64_t batch,
                                   int64_t seq);
  int64_t bytes() const;  // total bytes held (excluding the input view)
  // Allocates every tensor that is still undefined (shapes from cfg, batch and seq; seq is the
  // whole sequence, of which the layernorm/residual tensors keep seq / shard.seq_parts).
  // dense_mlp: also fc and fc_gelu (an MoE block keeps `moe` instead; allocate(), which knows
  // no block, leaves them to each dense block's forward when the model has experts).
  void allocate_missing(const GPTConfig& cfg, const BlockShard& shard, int64_t batch, int64_t seq,
                        bool dense_mlp);
};

// What a split backward's B keeps for its W: each weighted layer's upstream gradient, in the
// activations' type (MemCategory::activations); x of every layer is already in the activations.
struct BlockWeightGradInputs {
  Tensor d_out;   // dy of mlp_proj (a copy: the block's dout is overwritten by dx)
  Tensor d_fc;    // dy of fc (after the GELU backward)
  Tensor d_ln2;   // dy of ln2
  Tensor d_res1;  // dy of attn_proj
  Tensor d_qkv;   // dy of qkv
  Tensor d_ln1;   // dy of ln1
};

struct Block {
  int heads = 1;     // heads computed here (all of them unless sharded)
  GPTConfig config;  // shapes, dtype and recompute mode of the activations it keeps
  BlockShard shard;  // the heads and hidden units this block computes
  LayerNorm ln1;
  Linear qkv;        // C -> (H+2KV)D (column linear: local q, k and v heads x head_size outputs)
  Linear attn_proj;  // C -> C       (row linear: residual projection)
  LayerNorm ln2;
  Linear fc;        // C -> F       (column linear: local hidden units; swiglu: gate | up, 2F)
  Linear mlp_proj;  // F -> C       (row linear: residual projection)
  MoeLayer moe;     // an MoE block's MLP instead of fc and mlp_proj (moe.experts == 0: dense)
  BlockComm comm;   // where a layout communicates; all null = one device
  // Rotary positions: the global position of each of the T tokens of qkv; empty means 0..T-1.
  // Context parallelism sets them (GPT::set_positions), as it does the embedding's.
  std::vector<int32_t> positions;

  Block() = default;
  Block(const GPTConfig& cfg, int index);
  Block(const GPTConfig& cfg, int index, const BlockShard& shard);  // declared, not allocated
  bool is_moe() const { return moe.experts > 0; }
  // Reads x [B,T,C], fills `acts` (acts.out is the result; acts.input keeps a view of x).
  void forward(const Tensor& x, BlockActivations& acts) const;
  // dx = d loss / d x (overwritten; dx may be the same tensor as dout); parameter grads += .
  // Under config.recompute, first re-makes what forward dropped (a "recompute" trace event).
  void backward(Tensor& dx, const Tensor& dout, const BlockActivations& acts);
  // Zero-bubble's split of the same backward (acts: complete, recomputed if need be):
  //   B: dx only (dx may alias dout), filling `keep`; parameter grads untouched;
  //   W: parameter grads += from what B kept.
  void backward_input(Tensor& dx, const Tensor& dout, const BlockActivations& acts,
                      BlockWeightGradInputs& keep) const;
  void backward_weight(const BlockActivations& acts, const BlockWeightGradInputs& keep);
  // The forward's math alone, into fully allocated `acts` (forward = allocate, this, drop);
  // `pass`: the forward, or a full recompute's (its expert exchanges are labelled so).
  void forward_math(const Tensor& x, BlockActivations& acts, MoePass pass = MoePass::forward) const;
  // `kept` completed with what the recompute mode dropped (a copy of `kept` under none).
  BlockActivations recomputed(const BlockActivations& kept) const;
  void collect(ParamList& list);

  // The communication points, dispatched to `comm` (null: the one-device op) with the layout's
  // phase paused around them.
  void column_forward(const Linear& linear, Tensor& out, const Tensor& inp) const;
  void column_backward(Linear& linear, Tensor& dinp, const Tensor& dout, const Tensor& inp) const;
  void row_forward(const Linear& linear, Tensor& out, const Tensor& inp) const;
  void row_backward(Linear& linear, Tensor& dinp, const Tensor& dout, const Tensor& inp) const;
  void column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) const;
  void attention_forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv) const;
  void attention_backward(Tensor& dqkv, const Tensor& dout, const BlockActivations& a) const;
  AttentionHeads attention_heads() const { return {heads, shard.local_kv_heads()}; }

 private:
  // RoPE on qkv's q and k columns (in place), and its backward on their gradient; nothing under
  // learned positions.
  void rotate_positions(Tensor& qkv_or_grad, bool backward) const;
  // The backward, written once: each layer's input and weight gradients together (deferred
  // null), or only the input gradients, keeping in *deferred what backward_weight needs.
  void backward_pass(Tensor& dx, const Tensor& dout, const BlockActivations& a,
                     BlockWeightGradInputs* deferred);
};

}  // namespace mgpu

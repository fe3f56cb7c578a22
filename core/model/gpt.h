// A tiny GPT-2 style model with explicit forward AND backward for every layer, no autograd.
//
//   tokens -> Embedding (token + position) -> Block x layers -> Head (layernorm, LM head, loss)
//   Block:  x + attn(ln1(x)),  then  h + mlp(ln2(h))      (pre-norm residual blocks)
//
// Every layer is its own small struct that can be run on its own with explicit activation
// storage, so a pipeline stage can own a contiguous range of blocks:
//   model.embedding.forward(x, tokens);
//   for (i in my blocks) model.blocks[i].forward(x_i, acts[i]);   // acts[i].out is x_{i+1}
//   loss = model.head.forward_loss(x_L, targets, head_acts);
//   model.head.backward(dx, head_acts);  then blocks backward in reverse, then embedding.
//
// Weight layout (for tensor parallelism): every Linear weight is [out_features, in_features]
// (PyTorch / llm.c), y = x @ W^T + b. Column-parallel (split the outputs) = a contiguous range of
// weight ROWS (Tensor::rows) plus that slice of the bias; row-parallel (split the inputs) = a
// range of weight COLUMNS, bias added once. attn.qkv.weight is [3C, C]: rows [0,C) make q,
// [C,2C) k, [2C,3C) v, and within each, head h owns rows [h*hs, (h+1)*hs).
//
// Parallel layouts: a Block is parametrised by its shard (BlockShard: the heads and MLP hidden
// units this rank computes; all of them on one device) and communicates through its BlockComm
// (linears: TP/SP; attention: CP), the few places where a parallel layout communicates; on one
// device every point is the plain op, so the model never names a paradigm.
//
// Gradients: parameter .grad tensors ACCUMULATE (+=) across backward calls (gradient
// accumulation); call zero_grad() between steps. Activation gradients are overwritten.
// Token ids and targets: std::span<const int32_t> of length B*T, row-major [B, T].
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/model/block.h"
#include "core/model/config.h"
#include "core/model/layers.h"

namespace mgpu {

// All activations of one forward pass of the whole model.
struct GPTActivations {
  Tensor embedded;  // [B,T,C] (T / seq_parts tokens under sequence parallelism: block 0's input)
  std::vector<BlockActivations> blocks;
  HeadActivations head;
  static GPTActivations allocate(const GPTConfig& cfg, int64_t batch, int64_t seq);
  static GPTActivations allocate(const GPTConfig& cfg, const BlockShard& shard, int64_t batch,
                                 int64_t seq, int vocab_parts = 1);
};

class GPT {
 public:
  explicit GPT(const GPTConfig& cfg);  // validates cfg; seeded init (same seed, same weights)
  // A model whose blocks hold only `shard` (the rest replicated), declared but not allocated (any
  // shard, the whole one too): the layout sets each parameter's PartitionSpec and materialises
  // what it keeps (core/model/init.h), so every shard is born as its slice of the seeded
  // single-device model and nothing larger ever exists.
  GPT(const GPTConfig& cfg, const BlockShard& shard);
  GPT(const GPT&) = delete;  // params() hands out pointers into this object (the tied head too)
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return config_; }
  const BlockShard& shard() const { return shard_; }
  // Every block communicates through `comm` (null members: one device). What it points to must
  // outlive the model's use.
  void set_block_comm(const BlockComm& comm);
  // The global position of each token a forward sees (empty: 0..T-1), read by the position table
  // and by the blocks' rotary positions. Context parallelism sets its chunks'.
  void set_positions(const std::vector<int32_t>& positions);
  // The scale the head's loss gradient carries (1 / micro-batches x loss scale), stored in every
  // MoE block so the aux loss's gradient carries it too. forward() sets it from its grad_scale;
  // a layout that calls head.forward_loss itself sets it before its blocks' backward.
  void set_loss_grad_scale(float scale);
  // Sum over the MoE blocks of their last forward's aux loss (0 for a dense model): not part of
  // the loss forward() returns, but its gradient is in the backward.
  float aux_loss() const;
  // Per MoE block (in block order): its last forward's routing counts and aux loss.
  std::vector<MoeStats> moe_stats() const;
  ParamList params();  // forward order: embedding, blocks[0..L), head (wte once when tied)
  void zero_grad();
  int64_t num_params() const;  // this rank's (every expert it holds)
  // The parameters one token's forward uses: num_params() less the experts it is not routed to
  // (top_k of each MoE block's experts run per token). num_params() for a dense model.
  int64_t active_params() const;
  // Training FLOPs per token: 6N (forward 2N + backward 4N) plus attention scores and weighted
  // sums, 6 * layers * T * C (full T x T; the causal kernels do about half of it). With experts,
  // N counts the active parameters: top_k experts per token and the router.
  double flops_per_token(int64_t seq) const;

  // Full forward + loss; acts must come from GPTActivations::allocate(cfg, B, T).
  float forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                GPTActivations& acts, float grad_scale = 1.0f);
  // Backward of the last forward(acts); accumulates into every parameter's .grad.
  void backward(std::span<const int32_t> tokens, GPTActivations& acts);
  // forward + backward with freshly allocated activations; returns the mean loss over B*T.
  float forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                         int64_t batch, int64_t seq, float grad_scale = 1.0f);
  // Forward only: the mean loss (no gradient change).
  float loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch,
             int64_t seq);

  Embedding embedding;
  std::vector<Block> blocks;
  Head head;

 private:
  GPTConfig config_;
  BlockShard shard_;
};

}  // namespace mgpu

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
#include <string>
#include <vector>

#include "core/model/moe.h"
#include "core/model/param.h"
#include "core/tensor/tensor.h"

namespace mgpu {

// Activation checkpointing (what a block keeps from its forward for its backward):
//   none:      everything;
//   selective: everything but the attention probabilities [B,H,T,T] (the T^2 part), which the
//              backward recomputes from qkv (Korthikanti et al. 2022);
//   full:      only the block's input and output; the backward re-runs the block's forward.
// Recomputation is deterministic, so every mode gives bit-identical gradients.
enum class Recompute : uint8_t { none, selective, full };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& text);  // throws std::invalid_argument

struct GPTConfig {
  int vocab = 64;    // number of token ids
  int seq_len = 64;  // maximum sequence length T (rows of the position embedding)
  int layers = 2;    // transformer blocks
  int dim = 64;      // channels C
  int heads = 4;     // attention heads; must divide dim
  uint64_t seed = 1337;
  // Mixed precision: parameters and activations are stored in `dtype` (f32, bf16, f16);
  // gradients stay fp32 (accumulated across micro-batches and all-reduced in fp32), and the
  // optimizer keeps fp32 master weights (optim::MixedPrecision).
  DType dtype = DType::f32;
  Recompute recompute = Recompute::none;
  // Tied embeddings (GPT-2, Press & Wolf 2017): the output head reads the token-embedding matrix,
  // logits = x @ wte^T, and its gradient adds to wte's. One matrix of vocab x dim instead of two.
  bool tie_embeddings = false;

  // Mixture of experts (core/model/moe.h): with experts > 0, block i's MLP is an MoE layer when
  // i % moe_every == moe_every - 1 (1: every block). 0 experts is the dense model, unchanged.
  int experts = 0;
  int top_k = 1;      // experts each token is sent to
  int moe_every = 1;  // every n-th block is MoE (the last of each n)
  // Bounds of the MoE numbers: a capacity factor of experts / top_k already keeps every token,
  // and a load-balancing weight of 1000 already drowns the language-model loss.
  static constexpr double kMaxCapacityFactor = 1e6;
  static constexpr double kMaxAuxLossCoef = 1000;
  double capacity_factor = 0.0;  // per-group capacity, expert_capacity(); 0 = dropless
  int expert_hidden = 0;         // each expert's hidden width; 0 = 4 * dim
  float aux_loss_coef = 0.01f;   // Switch Transformer's load-balancing loss weight
  // The routing (exercise 09's seam): handed in where the model is built
  // (ex::selected_seams().moe.route). An MoE model without one throws when it first routes.
  RouteFn route = nullptr;

  // Throws std::invalid_argument with one line saying what is wrong and what would work.
  void validate() const;
  void validate_experts() const;  // validate()'s part for the MoE fields
  int head_size() const { return dim / heads; }
  bool is_moe_block(int index) const { return experts > 0 && index % moe_every == moe_every - 1; }
  int64_t expert_hidden_size() const { return expert_hidden > 0 ? expert_hidden : 4 * dim; }
};

// The layouts that cannot run an MoE block (context and sequence parallelism split a sequence,
// the group the routing counts in; zero-bubble's split backward has no MoE half) refuse it:
// throws std::invalid_argument "<layout> cannot run experts (--experts E): <instead>" when cfg has
// experts, nothing otherwise.
void refuse_experts(const GPTConfig& cfg, const std::string& layout, const std::string& instead);

// y = x @ W^T + b, W [out, in]. The bias is optional (the LM head has none).
struct Linear {
  Param weight;  // [out, in]
  Param bias;    // [out], or undefined tensors when there is no bias
  Linear() = default;
  // Declared (no memory yet): weight ~ N(0, stddev), bias 0 when materialised (core/model/init.h).
  Linear(const std::string& name, int64_t in, int64_t out, float stddev, bool has_bias = true);
  void forward(Tensor& out, const Tensor& inp) const;
  // dinp overwritten; weight.grad and bias.grad accumulated.
  void backward(Tensor& dinp, const Tensor& dout, const Tensor& inp);
  // backward's two halves (zero-bubble runs them apart): dinp = dout @ W (overwritten), and
  // weight.grad += dout^T @ inp, bias.grad += column sums of dout.
  void backward_input(Tensor& dinp, const Tensor& dout) const;
  void backward_weight(const Tensor& dout, const Tensor& inp);
  void collect(ParamList& list);
};

struct LayerNorm {
  Param weight;  // [C], init 1
  Param bias;    // [C], init 0
  LayerNorm() = default;
  LayerNorm(const std::string& name, int64_t dim);
  void forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp) const;
  void backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                const Tensor& rstd);
  // backward's two halves: only dinp, or only the weight and bias gradients (+=).
  void backward_input(Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                      const Tensor& rstd) const;
  void backward_weight(const Tensor& dout, const Tensor& inp, const Tensor& mean,
                       const Tensor& rstd);
  void collect(ParamList& list);
};

// Token + position embedding: out[b,t] = wte[token] + wpe[position of t].
struct Embedding {
  Param wte;  // [vocab, C]
  Param wpe;  // [seq_len, C]
  // The global position of each of the T tokens a forward sees; empty means 0..T-1. Context
  // parallelism sets it: a rank holds a chunk (or, zigzag, two chunks) of every sequence.
  std::vector<int32_t> positions;
  Embedding() = default;
  explicit Embedding(const GPTConfig& cfg);                            // declared: N(0, 0.02) both
  void forward(Tensor& out, std::span<const int32_t> tokens) const;    // out [B, T, C]
  void backward(const Tensor& dout, std::span<const int32_t> tokens);  // accumulates grads
  void collect(ParamList& list);
};

// The part of a block one rank computes: its attention heads and its MLP hidden units. The
// whole block on one device; a contiguous range of both under tensor parallelism. Under sequence
// parallelism the regions outside the four linears (layernorms, residual adds, the block's input
// and output) also hold only this rank's T/seq_parts tokens; the column linears' LinearComm then
// reads [B,T/seq_parts,C] and writes [B,T,local], the row linears' the reverse.
struct BlockShard {
  int heads = 0;      // attention heads computed here (each of head_size channels)
  int hidden = 0;     // MLP hidden units computed here (4 * dim for the whole block)
  int seq_parts = 1;  // the replicated regions hold T / seq_parts tokens (1: the whole sequence)
  // Keys per query row that BlockActivations::att keeps (its last dim); 0 = the block's own
  // tokens. Context parallelism keeps a rank's rows of the whole sequence's T x T matrix.
  int attention_keys = 0;
  // The MoE layers' experts are split into this many equal parts (ep), of which this rank holds
  // one (which one: its ExpertComm's rank). Experts are never tensor-split: each tp rank holds
  // whole experts (what Megatron calls expert-TP = 1, computed redundantly here).
  int expert_parts = 1;
  static BlockShard whole(const GPTConfig& cfg) { return {cfg.heads, 4 * cfg.dim}; }
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

class AttentionComm {
 public:
  virtual ~AttentionComm() = default;
  // qkv [B,T,3C] -> out [B,T,C], keeping in att (and lse, which it may allocate) what backward
  // reads. `category` labels the compute scopes it opens (the phase it runs in).
  virtual void forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv, int heads,
                       const std::string& category) = 0;
  // dqkv overwritten from dout and what forward kept (out: forward's output).
  virtual void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& att, const Tensor& lse, int heads,
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
  Tensor ln1, ln1_mean, ln1_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor qkv;                      // [B,T,3C]  (3 x local heads x head_size under a shard)
  Tensor att;                      // [B,H,T,T] attention probabilities (H: local heads)
  Tensor lse;                      // [B,H,T] f32 log-sum-exp per query (ring attention only)
  Tensor attn_out;                 // [B,T,C] heads' outputs, before the projection (local heads)
  Tensor res1;                     // [B,T,C] input + attention branch
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor fc;                       // [B,T,4C] before GELU (local hidden units)
  Tensor fc_gelu;                  // [B,T,4C] after GELU
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
  Linear qkv;        // C -> 3C      (column linear: 3 x local heads x head_size outputs)
  Linear attn_proj;  // C -> C       (row linear: residual projection)
  LayerNorm ln2;
  Linear fc;        // C -> 4C      (column linear: local hidden units)
  Linear mlp_proj;  // 4C -> C      (row linear: residual projection)
  MoeLayer moe;     // an MoE block's MLP instead of fc and mlp_proj (moe.experts == 0: dense)
  BlockComm comm;   // where a layout communicates; all null = one device

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

 private:
  // The backward, written once: each layer's input and weight gradients together (deferred
  // null), or only the input gradients, keeping in *deferred what backward_weight needs.
  void backward_pass(Tensor& dx, const Tensor& dout, const BlockActivations& a,
                     BlockWeightGradInputs* deferred);
};

struct HeadActivations {
  Tensor input;                 // [B,T,C] a view of the last block's output
  Tensor ln, ln_mean, ln_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor logits;                // [B,T,V]
  Tensor dlogits;               // [B,T,V] written by forward_loss
  // vocab_parts: the head's vocabulary split over that many ranks (logits [B,T,V/vocab_parts]).
  static HeadActivations allocate(const GPTConfig& cfg, int64_t batch, int64_t seq,
                                  int vocab_parts = 1);
};

// Where a layout communicates in the head: the vocabulary-parallel head (Megatron-LM), whose
// lm_head holds a range of the vocabulary's rows on each rank (core/parallel/vocab_parallel.h).
// Null on Head: the one-device head.
class HeadComm {
 public:
  virtual ~HeadComm() = default;
  virtual int vocab_parts() const = 0;  // how many ranks share the vocabulary
  // The mean loss over the rows of logits [B,T,V/parts] (this rank's columns of the whole
  // vocabulary's) and grad_scale * dloss/dlogits on those columns.
  virtual float cross_entropy(Tensor& dlogits, const Tensor& logits,
                              std::span<const int32_t> targets, float grad_scale) = 0;
  // d_ln = dlogits @ weight summed over the ranks (each holds a partial product): the column
  // linear's input gradient.
  virtual void input_grad(Tensor& d_ln, const Tensor& dlogits, const Tensor& weight) = 0;
};

// Final layernorm + LM head (no bias) + mean cross-entropy.
// Tied (GPTConfig::tie_embeddings): the head's matrix is the embedding's wte. Where the embedding
// lives beside the head, `tied` points at it and lm_head holds nothing; where it does not (the
// last pipeline stage), lm_head.weight is this stage's copy of wte, named and seeded as
// "embedding.wte", whose gradient the layout sums with the embedding's (pipeline: the embedding
// group).
struct Head {
  LayerNorm ln_f;
  Linear lm_head;            // C -> vocab, no bias
  Param* tied = nullptr;     // the embedding's wte, when tied and beside it
  HeadComm* comm = nullptr;  // the vocabulary-parallel head's communication; null: one device
  Head() = default;
  int vocab_parts() const { return comm ? comm->vocab_parts() : 1; }
  explicit Head(const GPTConfig& cfg);  // declared, not allocated
  // The matrix the logits are computed with: the tied wte, or lm_head's own weight.
  Param& output_weight() { return tied ? *tied : lm_head.weight; }
  const Param& output_weight() const { return tied ? *tied : lm_head.weight; }
  // Returns the mean loss over B*T tokens and leaves grad_scale * dloss/dlogits in acts.dlogits.
  float forward_loss(const Tensor& x, std::span<const int32_t> targets, HeadActivations& acts,
                     float grad_scale = 1.0f) const;
  void backward(Tensor& dx, const HeadActivations& acts);  // dx overwritten, grads +=
  void collect(ParamList& list);  // ln_f, then lm_head's weight unless it reads `tied`
};

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

// The model's layers other than the block: Linear, LayerNorm, the token + position Embedding and
// the Head (final layernorm, LM head, loss), each with its forward and its backward.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/param.h"
#include "core/tensor/tensor.h"

namespace mgpu {

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

// The MLP's activation between fc and proj, for the dense MLP and the experts alike: GELU's
// gelu(fc), or SwiGLU's silu(gate) * up where fc holds gate | up (Shazeer 2020). The backward
// overwrites d_fc from d_out: GELU's is elementwise (d_out may be d_fc itself), SwiGLU's reads
// [N, F] and writes [N, 2F] (d_out a buffer of its own).
void mlp_activation_forward(Tensor& out, const Tensor& fc, MlpKind kind);
void mlp_activation_backward(Tensor& d_fc, const Tensor& fc, const Tensor& d_out, MlpKind kind);

// The block's norm: LayerNorm (Ba et al. 2016), or with rms RMSNorm (Zhang & Sennrich 2019),
// which has no bias and no mean (`mean` stays undefined, only rstd is kept).
struct LayerNorm {
  Param weight;  // [C], init 1
  Param bias;    // [C], init 0 (undefined under rms)
  bool rms = false;
  LayerNorm() = default;
  LayerNorm(const std::string& name, int64_t dim, Norm norm = Norm::layernorm);
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

// Token + position embedding: out[b,t] = wte[token] + wpe[position of t]. Under rotary positions
// there is no wpe (the blocks rotate q and k instead): out[b,t] = wte[token].
struct Embedding {
  Param wte;  // [vocab, C]
  Param wpe;  // [seq_len, C]; undefined (no name) under rope
  // The global position of each of the T tokens a forward sees; empty means 0..T-1. Context
  // parallelism sets it: a rank holds a chunk (or, zigzag, two chunks) of every sequence.
  std::vector<int32_t> positions;
  Embedding() = default;
  explicit Embedding(const GPTConfig& cfg);                            // declared: N(0, 0.02) both
  void forward(Tensor& out, std::span<const int32_t> tokens) const;    // out [B, T, C]
  void backward(const Tensor& dout, std::span<const int32_t> tokens);  // accumulates grads
  void collect(ParamList& list);
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

}  // namespace mgpu

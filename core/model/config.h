// The model's description: its sizes, precision, activation recompute and experts, validated in
// one place (GPTConfig::validate), and the refusal a layout gives a model with experts.
#pragma once
#include <cstdint>
#include <string>

#include "core/model/moe.h"
#include "core/runtime/dtype.h"

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

// The block's style: GPT-2's (the defaults) or a Llama's (Touvron et al. 2023; Llama 3, Dubey et
// al. 2024). Each field changes one layer, and the defaults give GPT-2's model bit for bit:
//   norm       layernorm (mean and variance, weight + bias) | rmsnorm (root mean square, weight);
//   mlp        gelu: proj(gelu(fc(x))), fc C -> F | swiglu: proj(silu(gate) * up), fc C -> 2F
//              holding gate | up (Shazeer 2020), F = ffn_dim (0: 4 C);
//   positions  learned (a [T, C] table added to the tokens) | rope (q and k rotated by each
//              token's position, no table; Su et al. 2021), rope_theta the base of its angles;
//   kv_heads   grouped-query attention (Ainslie et al. 2023): query heads share kv_heads key and
//              value heads, qkv is C -> (heads + 2 kv_heads) D (0: heads, i.e. multi-head);
//   bias       the linears' biases (off: none, as Llama).
enum class Norm : uint8_t { layernorm, rmsnorm };
enum class MlpKind : uint8_t { gelu, swiglu };
enum class Positions : uint8_t { learned, rope };
const char* norm_name(Norm n);
const char* mlp_name(MlpKind m);
const char* positions_name(Positions p);

struct BlockStyle {
  Norm norm = Norm::layernorm;
  MlpKind mlp = MlpKind::gelu;
  int ffn_dim = 0;  // the MLP's hidden width F; 0 = 4 * dim
  Positions positions = Positions::learned;
  float rope_theta = 10000.0f;  // Llama 2's; Llama 3 uses 500000
  int kv_heads = 0;             // 0 = heads
  bool bias = true;
  bool is_gpt2() const { return *this == BlockStyle{}; }
  bool operator==(const BlockStyle&) const = default;
};

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
  int expert_hidden = 0;         // each expert's hidden width; 0 = the MLP's (ffn_hidden)
  float aux_loss_coef = 0.01f;   // Switch Transformer's load-balancing loss weight
  // The routing (exercise 09's seam): handed in where the model is built
  // (ex::selected_seams().moe.route). An MoE model without one throws when it first routes.
  RouteFn route = nullptr;

  BlockStyle style;  // GPT-2's block by default; a Llama's with rmsnorm, swiglu, rope, GQA

  // Throws std::invalid_argument with one line saying what is wrong and what would work.
  void validate() const;
  void validate_style() const;    // validate()'s part for the block style
  void validate_experts() const;  // validate()'s part for the MoE fields
  int head_size() const { return dim / heads; }
  bool is_moe_block(int index) const { return experts > 0 && index % moe_every == moe_every - 1; }
  int kv_head_count() const { return style.kv_heads > 0 ? style.kv_heads : heads; }
  // Channels of q, of k and of v: heads x D and kv heads x D each. qkv's width is their sum.
  int64_t kv_dim() const { return int64_t{kv_head_count()} * head_size(); }
  int64_t qkv_width() const { return dim + 2 * kv_dim(); }
  // The dense MLP's hidden width F (fc's outputs under gelu; half of them under swiglu).
  int64_t ffn_hidden() const { return style.ffn_dim > 0 ? style.ffn_dim : 4 * int64_t{dim}; }
  bool swiglu() const { return style.mlp == MlpKind::swiglu; }
  bool rope() const { return style.positions == Positions::rope; }
  bool rmsnorm() const { return style.norm == Norm::rmsnorm; }
  // fc's outputs for `hidden` hidden units: hidden, or gate | up (2 hidden) under swiglu.
  int64_t fc_width(int64_t hidden) const { return swiglu() ? 2 * hidden : hidden; }
  int64_t expert_hidden_size() const { return expert_hidden > 0 ? expert_hidden : ffn_hidden(); }
};

// The layouts that cannot run an MoE block (context and sequence parallelism split a sequence,
// the group the routing counts in; zero-bubble's split backward has no MoE half) refuse it:
// throws std::invalid_argument "<layout> cannot run experts (--experts E): <instead>" when cfg has
// experts, nothing otherwise.
void refuse_experts(const GPTConfig& cfg, const std::string& layout, const std::string& instead);

}  // namespace mgpu

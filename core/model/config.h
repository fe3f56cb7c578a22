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

}  // namespace mgpu

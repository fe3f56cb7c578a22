// Closed forms of the model states: bytes per parameter by precision and optimizer, the ZeRO
// paper's per-rank bytes at each stage and its bytes on the wire, and the GPT's parameter counts
// (whole, per block, per pipeline stage under tensor parallelism). The lessons print them beside
// what the allocator measures; the planner's screen and the memory-estimator reference use them.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/model/config.h"

namespace mgpu::theory {

// Bytes per parameter of the model states, as the runs keep them: the weights in the model's
// type (4 fp32, 2 bf16/fp16), the gradients always fp32 (accumulated and reduced in fp32), the
// optimizer state SGD's momentum 4 or AdamW's m + v 8, plus the fp32 master weights 4 under mixed
// precision (the ZeRO paper's K = 12 for mixed-precision Adam).
struct StateBytes {
  int params = 4, grads = 4, optimizer = 8;
  int total() const { return params + grads + optimizer; }
};
StateBytes model_state_bytes(int weight_bytes, std::string_view optimizer);

// The ZeRO paper's per-rank model-state bytes of each category at a stage (0 = DDP, 1 = P_os,
// 2 = P_os+g, 3 = P_os+g+p) for Psi parameters over N ranks (Rajbhandari et al., "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", SC 2020, Figure 1 and section 5).
struct ZeroStates {
  double params, grads, optimizer;
  double total() const { return params + grads + optimizer; }
};
ZeroStates zero_model_states(int stage, const StateBytes& b, double psi, double n);

// Bytes one rank sends per step at a ZeRO stage with ring collectives (the paper's section 7):
// stage 0 all-reduces the gradients, 2(N-1)/N x G; stages 1-2 reduce-scatter the gradients and
// all-gather the parameters, (N-1)/N each; stage 3 all-gathers the parameters twice (forward and
// backward).
double zero_bytes_sent(int stage, const StateBytes& b, double psi, double n);

// Parameters of one transformer block of width C: two layernorms 4C, qkv 3C^2 + 3C, attention
// projection C^2 + C, MLP 8C^2 + 5C = 12 C^2 + 13 C (GPT-2; Kaplan et al. 2020, table 1 counts
// the 12 C^2).
int64_t block_parameters(int64_t C);

// One block's parameters in any style (config.h: BlockStyle), in the two parts tensor
// parallelism treats differently (Megatron-LM's split, Shoeybi et al. 2019, section 3):
//   sharded     the column linears' weights and biases (qkv: C x (H + 2 KV) D, fc: C x F or, under
//               SwiGLU, C x 2F for gate | up) and the row linears' weights (proj C x C, F x C);
//   replicated  the two norms (2C each for layernorm, C for rmsnorm) and the row linears' biases.
// A dense block; an MoE block's MLP is moe_mlp_parameters instead. GPT-2's: 12C^2 + 7C and 6C.
struct BlockParameters {
  int64_t sharded = 0, replicated = 0;
  int64_t total() const { return sharded + replicated; }
};
BlockParameters block_parameters(const GPTConfig& cfg);
// The dense MLP's part of block_parameters(cfg): fc and proj, weights and biases.
int64_t dense_mlp_parameters(const GPTConfig& cfg);
// One norm's parameters: 2C (layernorm's weight and bias) or C (rmsnorm's weight).
int64_t norm_parameters(const GPTConfig& cfg);

// A mixture of experts' MLP in place of a block's (core/model/moe.h): the router E C (no bias)
// and E experts of hidden width H, each fc H C + H and proj C H + C: E (2 H C + H + C + C).
// `experts_used` of the E counted (E: the layer's parameters; top_k: those one token uses).
int64_t moe_mlp_parameters(int64_t C, int64_t experts, int64_t hidden, int64_t experts_used);
// The same in the model's style: each expert a SwiGLU MLP (3 H C, Mixtral's) under swiglu, and
// without its biases when the model has none.
int64_t moe_mlp_parameters(const GPTConfig& cfg, int64_t experts_used);
// Blocks that are MoE (GPTConfig::is_moe_block): layers / moe_every, 0 without experts.
int64_t moe_blocks(const GPTConfig& cfg);

// Parameters of the whole GPT: embeddings (V + T) C (V C with rope: no position table), the
// blocks, the final norm and the head's V C unless it is tied to the token embedding (then counted
// once, as GPT-2 publishes: gpt2-small 124,439,808). An MoE block counts its router and all E
// experts instead of the MLP. llama3-8b: 8,030,261,248 (Llama 3's published 8.0B).
int64_t gpt_parameters(const GPTConfig& cfg);
// The parameters one token's forward multiplies with (Switch Transformer's and Mixtral's
// "active" count): gpt_parameters with each MoE block's top_k experts of E (router whole).
// gpt_parameters for a dense model.
int64_t gpt_active_parameters(const GPTConfig& cfg);

// Parameters pipeline stage s of P holds, tensor parallel over t (Megatron-LM's split: the
// sharded part of each block over t, the replicated part whole; GPT-2's 12 C^2 + 7 C and 6 C):
// [s=0](V+T)C + L_s(replicated + sharded/t) + [s=P-1](V C + norm). Tied, the last stage still
// holds its copy of the V C matrix (the embedding group's), except on a single stage, where the
// head reads the embedding's. Dense blocks (an MoE model's stages: the planner's screen).
int64_t stage_parameters(const GPTConfig& cfg, int64_t stage_layers, int64_t tp, bool first_stage,
                         bool last_stage);

// Bytes of one token's keys and values in one block: 2 x kv_heads x D elements of `dtype_bytes`
// (grouped-query attention keeps KV of the H heads' keys and values; Ainslie et al. 2023). What
// context parallelism moves per token and block: ring attention passes them around the ring
// (Liu et al. 2023), Ulysses all-to-alls them with q (Jacobs et al. 2023). GPT-2: 2 C.
int64_t kv_bytes_per_token(const GPTConfig& cfg, int dtype_bytes);

// Bytes of the tied embedding's gradient that a pipeline's embedding group {first stage, last
// stage} all-reduces once per step: vocab x dim x 4 (gradients are fp32 in every precision).
// Each of the two members sends 2(N-1)/N = 1 times it in a ring of N = 2 (Megatron-LM's
// _allreduce_embedding_grads; Shoeybi et al. 2019, Narayanan et al. 2021).
int64_t embedding_group_bytes(const GPTConfig& cfg);

// Training FLOPs per token of the GPT with `params` parameters: 6N for the weights' GEMMs (forward
// 2N, backward 4N; Kaplan et al., "Scaling Laws for Neural Language Models", 2020, section 2.1)
// plus attention's scores and mixing, 6 x layers x T x C (GPT::flops_per_token).
inline double training_flops_per_token(int64_t params, int layers, int seq, int dim) {
  return 6.0 * double(params) + 6.0 * layers * double(seq) * dim;
}

// The model's FLOPs per token that MFU is quoted in (PaLM, Chowdhery et al. 2022, appendix B):
// 6N for the matmuls over the `params` multiplied parameters (the embedding lookups excluded)
// plus 12 x layers x T x C for attention's QK^T and AV, forward and backward, without halving for
// the causal mask.
inline double model_flops_per_token(int64_t params, int layers, int seq, int dim) {
  return 6.0 * static_cast<double>(params) + 12.0 * layers * static_cast<double>(seq) * dim;
}

// FLOPs of one training iteration as Narayanan et al. 2021 count them for their TFLOP/s figures
// (section 5.1, equation 3): with full activation recomputation (a second forward) a GPT of
// `layers` blocks of width `dim`, vocabulary `vocab`, does 96 B s l h^2 (1 + s/6h + V/16lh) for a
// batch of B sequences of s tokens: hardware FLOPs, the recompute counted.
inline double megatron_recompute_flops(double batch, double seq, double layers, double dim,
                                       double vocab) {
  return 96.0 * batch * seq * layers * dim * dim *
         (1.0 + seq / (6.0 * dim) + vocab / (16.0 * layers * dim));
}

// Parameters of the whole model under tensor parallelism (Megatron-LM, Shoeybi et al. 2019,
// section 3), split into what every tp rank holds in full (embeddings, layernorms, the
// row-parallel biases, the head) and what is divided over the tp ranks (the qkv, attention
// projection, fc and MLP projection weights, with the column-parallel biases).
struct TpParameterSplit {
  int64_t replicated = 0;
  int64_t sharded = 0;  // over all tp ranks together
  int64_t per_rank(int tp) const { return replicated + sharded / tp; }
};
TpParameterSplit tp_parameter_split(const GPTConfig& cfg);

}  // namespace mgpu::theory

// Mixture of experts: a block's MLP replaced by E expert MLPs and a router that sends each token
// to its top-k experts (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch Transformer,
// Fedus et al. 2021; Mixtral, Jiang et al. 2024).
//
//   probs  = softmax(x @ Wr^T)                         [N, E]   router, fp32
//   route  = top-k of each token's probs, renormalised weights, at most `capacity` tokens per
//            expert per group (exercise 09: the routing, its send counts and its permutation)
//   rows   = the kept (token, choice) pairs' x, permuted so each expert's rows are contiguous
//   y_e    = proj_e(gelu(fc_e(rows of e)))            each expert a GELU MLP
//   out[t] = sum over t's kept choices of weight * y                       (combine)
//   loss  += aux_loss_coef * E * sum_e f_e * P_e    Switch's load-balancing loss, per group
//
// Under expert parallelism the experts are split over the ranks of an `ep` group (rank j holds
// experts [j*E/ep, (j+1)*E/ep)) and the permuted rows travel to their expert's rank and back by
// two variable-size all-to-alls per layer (ExpertComm); on one device the exchange is a copy.
//
// Groups (GShard section 2.2): capacity, dropping and the auxiliary loss are counted per group
// of consecutive tokens, one sequence, so no layout's split of the batch changes which tokens an
// expert drops or what the loss is.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/model/param.h"
#include "core/tensor/tensor.h"

namespace mgpu {

// ---- routing: exercise 09's seam ----

// One routing call: the router's probabilities of `tokens` tokens, in groups of `group_tokens`
// consecutive tokens (tokens % group_tokens == 0).
struct RouteQuery {
  std::span<const float> probs;  // [tokens, experts] row-major, each row sums to 1
  int64_t tokens = 0;
  int64_t group_tokens = 0;  // capacity and priority are per group
  int experts = 0;
  int top_k = 1;
  int64_t capacity = 0;  // most (token, choice) slots an expert keeps per group; 0 = dropless
  int ranks = 1;         // expert-parallel ranks; rank j holds experts [j*E/ranks, (j+1)*E/ranks)
};

// Where each (token, choice) slot goes. A slot is token * top_k + choice.
struct Routing {
  // Per slot: choices in descending probability (ties: the lower expert first).
  std::vector<int32_t> expert;  // [tokens * top_k]
  std::vector<float> weight;    // [tokens * top_k] p / (sum of the token's top-k p), dropped too
  // Per slot: its row in the permuted buffer (its index in `order`), or -1 when dropped.
  std::vector<int32_t> position;  // [tokens * top_k]
  // The kept slots in dispatch order: by expert, then by increasing slot. Rows of expert e are
  // contiguous, and so are rows bound for one rank.
  std::vector<int32_t> order;
  std::vector<int64_t> tokens_per_expert;  // [experts] kept slots (over all groups)
  std::vector<int64_t> send_counts;        // [ranks] kept slots bound for each rank's experts
  int64_t dropped = 0;                     // slots over capacity
};
// Which slots an expert keeps when more than `capacity` choose it in one group: in order of
// (choice, token), so every token's first choice comes before any token's second (GShard), and
// earlier tokens before later ones within a choice.
using RouteFn = Routing (*)(const RouteQuery& query);

struct MoeSeams {
  const char* side = "";
  RouteFn route = nullptr;
};

// Per-group capacity: ceil(capacity_factor * group_tokens * top_k / experts); 0 (dropless) when
// capacity_factor is 0. The one place the rule is written (Switch Transformer eq. 4).
int64_t expert_capacity(double capacity_factor, int64_t group_tokens, int top_k, int experts);

// A routing with no values to route on (phantom devices: the planner, memory dry runs): every
// token's choices go round-robin over the experts, so every expert gets the same load.
Routing balanced_routing(const RouteQuery& query);

// Switch Transformer's load-balancing loss of one routing (eq. 4-6): per group of
// `group_tokens` tokens, E * sum_e f_e * P_e, with f_e the fraction of the group's (token,
// choice) slots that chose e (before capacity, as Megatron counts it) and P_e the group's mean
// probability of e; the mean over groups, times `coef`.
float moe_aux_loss(std::span<const float> probs, const Routing& routing, int64_t group_tokens,
                   int experts, int top_k, float coef);
// Adds scale * d(moe_aux_loss with coef 1)/d probs to d_probs ([tokens, experts]): E * f_e /
// (group_tokens * groups) at every probability of e in the group (f_e does not depend on them).
void moe_aux_loss_grad(std::span<float> d_probs, const Routing& routing, int64_t group_tokens,
                       int experts, int top_k, float scale);

// ---- the exchange around the experts (expert parallelism) ----

// Who sends how many rows to whom in one MoE layer's exchange, made once per forward from the
// routing and used by all four exchanges (forward dispatch and combine, and their backwards).
struct ExchangePlan {
  int ranks = 1, local_experts = 0;
  // Rows this rank sends to rank j for each of j's experts, [ranks][local_experts] flattened
  // (send[j * local_experts + e]: e counted within j's experts).
  std::vector<int64_t> send;
  // rows this rank receives from rank s for each of its own local experts, [ranks][local_experts].
  std::vector<int64_t> recv;
  int64_t sent_rows() const;      // sum of send
  int64_t received_rows() const;  // sum of recv
  // Rows of local expert e once received, from every source (sum over s of recv[s][e]).
  std::vector<int64_t> rows_per_local_expert() const;
};

// Where an exchange runs, which the trace names: the MoE block's index in the model and its pass.
// The block says so on every call, so an exchange keeps no cursor (a pipeline runs many
// micro-batches' blocks in an order only its schedule knows). A full recompute re-runs the
// forward's exchanges inside the backward pass.
enum class MoePass { forward, recompute, backward };
struct ExchangeSite {
  int layer = -1;  // the block's index in the whole model
  MoePass pass = MoePass::forward;
};

// Where a block's experts live and how their rows get there. Null (one device): this rank holds
// every expert and the exchanges are copies.
class ExpertComm {
 public:
  virtual ~ExpertComm() = default;
  virtual int ranks() const = 0;  // the ep group's size
  virtual int rank() const = 0;   // this rank's index: it holds experts [rank*E/ranks, ...)
  // Exchanges the per-expert counts (a small all-to-all) and returns the plan.
  virtual ExchangePlan plan(const Routing& routing, int experts, const ExchangeSite& site) = 0;
  // Rows in dispatch order [sent_rows, C] -> rows of this rank's experts [received_rows, C],
  // grouped by local expert (within an expert, by source rank). Forward dispatch; the backward
  // of combine.
  virtual void to_experts(const Tensor& rows, Tensor& expert_rows, const ExchangePlan& plan,
                          const ExchangeSite& site) = 0;
  // The reverse: rows of this rank's experts back to the ranks their tokens came from, in
  // dispatch order. Forward combine; the backward of dispatch.
  virtual void to_tokens(const Tensor& expert_rows, Tensor& rows, const ExchangePlan& plan,
                         const ExchangeSite& site) = 0;
};

// ---- the layer ----

struct GPTConfig;              // core/model/config.h
enum class MlpKind : uint8_t;  // core/model/config.h (gelu, swiglu)
struct BlockShard;             // core/model/gpt.h
struct BlockComm;              // core/model/gpt.h

// What one MoE forward routed (counted over the tokens it saw): what a lesson prints.
struct MoeStats {
  std::vector<int64_t> tokens_per_expert;  // [experts] kept (token, choice) slots
  int64_t dropped = 0;                     // slots over capacity
  float aux_loss = 0.0f;  // aux_loss_coef * mean over groups of E * sum_e f_e * P_e
};

// What an MoE layer's backward needs, kept from its forward (MemCategory::activations; N tokens,
// R = routing.order.size() kept rows, X rows at this rank's experts).
struct MoeActivations {
  Tensor probs;       // [N, E] f32 router probabilities
  Routing routing;    // host: choices, weights, positions, dispatch order
  ExchangePlan plan;  // who sends how many rows to whom (one device: all to itself)
  // [R, C] the kept slots' inputs in dispatch order. One device: the experts' rows themselves
  // (expert_rows is the same tensor); with an ExpertComm a comm buffer, dropped once sent.
  Tensor rows;
  Tensor expert_rows;  // [X, C] the rows at this rank's experts, by local expert
  Tensor fc;           // [X, H] before GELU ([X, 2H] gate | up under SwiGLU)
  Tensor fc_gelu;      // [X, H] after GELU (or SwiGLU)
  Tensor y;            // [R, C] the experts' outputs back in dispatch order (the combine's input)
  int64_t bytes() const;
};

// A block's MLP as E expert GELU MLPs behind a router (the formulas at the top of this file).
// The expert weights are stacked along dim 0, one expert per row of it: this rank holds
// `local_experts` consecutive ones (all of them on one device; E / ep under expert parallelism,
// a PartitionSpec::rows split set by the layout, so a checkpoint is the single-device one).
struct MoeLayer {
  int layer = -1;         // the block's index in the whole model (the exchanges' trace label)
  int experts = 0;        // E (0: the block is dense)
  int local_experts = 0;  // experts held here
  int top_k = 1;
  int64_t dim = 0, hidden = 0;  // C and each expert's hidden width H
  MlpKind mlp{};                // gelu; swiglu: Mixtral's experts, fc is gate | up, [E, 2H, C]
  double capacity_factor = 0.0;
  float aux_loss_coef = 0.0f;
  RouteFn route = nullptr;
  // The head's loss-gradient scale (1 / micro-batches x loss scale, GPT::set_loss_grad_scale):
  // the aux loss's gradient carries it too, so accumulation and loss scaling treat it alike.
  float loss_grad_scale = 1.0f;
  Param router;       // [E, C]     blocks.{i}.moe.router.weight (no bias)
  Param fc_weight;    // [E, H, C]  blocks.{i}.moe.fc.weight ([E, 2H, C] under SwiGLU)
  Param fc_bias;      // [E, H]     blocks.{i}.moe.fc.bias (undefined without biases)
  Param proj_weight;  // [E, C, H]  blocks.{i}.moe.proj.weight
  Param proj_bias;    // [E, C]     blocks.{i}.moe.proj.bias (undefined without biases)
  // The last forward's routing (the last micro-batch's, under accumulation).
  mutable MoeStats last;

  MoeLayer() = default;
  // Declared (no memory): block `index`'s layer, holding shard's part of the experts.
  MoeLayer(const GPTConfig& cfg, int index, const BlockShard& shard);
  // x [B,T,C] -> out [B,T,C] (overwritten), filling `acts`. Groups are the B sequences.
  // comm.experts null: every expert is here and the exchanges are copies. `pass`: forward, or a
  // full recompute's forward inside the backward.
  void forward(Tensor& out, const Tensor& x, MoeActivations& acts, const BlockComm& comm,
               MoePass pass = MoePass::forward) const;
  // dx (overwritten) from dout and what forward kept; parameter grads += (the aux loss's too).
  void backward(Tensor& dx, const Tensor& dout, const Tensor& x, const MoeActivations& acts,
                const BlockComm& comm);
  void collect(ParamList& list);
  // The stacked expert tensors this rank holds (fc and proj weights, and their biases if any).
  ParamList expert_params();

 private:
  Tensor router_probs(const Tensor& x) const;  // [N, E] f32
  Routing route_probs(const Tensor& probs, int64_t group_tokens, int ranks) const;
  Tensor experts_forward(MoeActivations& a, MemCategory out_category) const;
  Tensor experts_backward(const Tensor& d_out, const MoeActivations& a, MemCategory in_category);
  void router_backward(Tensor& dx, const Tensor& x, const MoeActivations& a,
                       std::span<const float> d_row_weight);
};

}  // namespace mgpu

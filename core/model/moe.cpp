// The mixture-of-experts layer (core/model/moe.h). Forward: router -> routing -> dispatch (a
// permutation, then the exchange to the experts' ranks) -> each local expert's MLP on its rows
// -> the exchange back -> weighted combine. The backward reads it bottom-up and adds the
// load-balancing loss's gradient to the router's.
#include "core/model/moe.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "core/model/gpt.h"
#include "core/model/init.h"
#include "core/model/trace_phase.h"
#include "core/ops/ops.h"

namespace mgpu {

// ---------------------------------------------------------------------------------- the layer

MoeLayer::MoeLayer(const GPTConfig& cfg, int index, const BlockShard& shard)
    : layer(index),
      experts(cfg.experts),
      local_experts(shard.expert_parts > 0 ? cfg.experts / shard.expert_parts : 0),
      top_k(cfg.top_k),
      dim(cfg.dim),
      hidden(cfg.expert_hidden_size()),
      mlp(cfg.style.mlp),
      capacity_factor(cfg.capacity_factor),
      aux_loss_coef(cfg.aux_loss_coef),
      route(cfg.route) {
  if (shard.expert_parts < 1 || cfg.experts % shard.expert_parts != 0)
    throw std::invalid_argument(fmt::format(
        "MoE layer: {} experts do not split into {} equal parts (ep must divide experts)",
        cfg.experts, shard.expert_parts));
  const std::string p = fmt::format("blocks.{}.moe.", index);
  const int64_t e = local_experts, c = dim, h = hidden, fc = cfg.fc_width(h);
  // As the dense MLP: fc ~ N(0, 0.02), the projection into the residual scaled by depth.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  router = Param::declared(p + "router.weight", {experts, c}, ParamInit::normal(0.02f));
  fc_weight = Param::declared(p + "fc.weight", {e, fc, c}, ParamInit::normal(0.02f));
  proj_weight = Param::declared(p + "proj.weight", {e, c, h}, ParamInit::normal(residual_std));
  if (!cfg.style.bias) return;  // Mixtral's experts have none
  fc_bias = Param::declared(p + "fc.bias", {e, fc}, ParamInit::constant(0.0f));
  proj_bias = Param::declared(p + "proj.bias", {e, c}, ParamInit::constant(0.0f));
}

void MoeLayer::collect(ParamList& list) {
  list.push_back(&router);
  for (Param* p : expert_params()) list.push_back(p);
}

ParamList MoeLayer::expert_params() {
  ParamList list;
  for (Param* p : {&fc_weight, &fc_bias, &proj_weight, &proj_bias})
    if (!p->name.empty()) list.push_back(p);
  return list;
}

int64_t MoeActivations::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&probs, &rows, &expert_rows, &fc, &fc_gelu, &y})
    if (t != &expert_rows || !expert_rows.same_view(rows)) total += t->bytes();  // one device
  return total;
}

namespace {
Tensor moe_tensor(const Shape& shape, MemCategory category, DType dtype) {
  return Tensor::empty(shape, category, dtype);
}
// Expert e's slice of a stacked tensor; an undefined one (no biases) stays undefined.
Tensor expert_slice(const Tensor& stacked, int e) {
  return stacked.defined() ? stacked.rows(e, e + 1) : Tensor();
}

// One device: every expert is here, so the plan sends each expert's rows to itself.
ExchangePlan local_plan(const Routing& routing, int experts) {
  return {.ranks = 1,
          .local_experts = experts,
          .send = routing.tokens_per_expert,
          .recv = routing.tokens_per_expert};
}

// Per row of the dispatch order: the token it came from and its combine weight.
std::vector<int32_t> token_of_rows(const Routing& routing, int top_k) {
  std::vector<int32_t> tokens(routing.order.size());
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = routing.order[i] / top_k;
  return tokens;
}
std::vector<float> weight_of_rows(const Routing& routing) {
  std::vector<float> weights(routing.order.size());
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = routing.weight[size_t(routing.order[i])];
  return weights;
}

// Calls fn(e, r0, r1) for each local expert e that has rows [r0, r1) at this rank (an expert
// without rows runs no kernel).
template <class Fn>
void for_each_expert_rows(const ExchangePlan& plan, Fn&& fn) {
  int64_t r0 = 0;
  const std::vector<int64_t> rows = plan.rows_per_local_expert();
  for (int e = 0; e < int(rows.size()); ++e) {
    if (rows[size_t(e)] > 0) fn(e, r0, r0 + rows[size_t(e)]);
    r0 += rows[size_t(e)];
  }
}
}  // namespace

// probs = softmax(x @ Wr^T) in fp32, whatever the activations' type (as Megatron's router).
Tensor MoeLayer::router_probs(const Tensor& x) const {
  const int64_t n = x.numel() / dim;
  Tensor logits = moe_tensor({n, experts}, MemCategory::workspace, DType::f32);
  ops::matmul(logits, x, router.data, false, /*trans_b=*/true);
  Tensor probs = moe_tensor({n, experts}, MemCategory::activations, DType::f32);
  ops::softmax_forward(probs, logits);
  return probs;
}

Routing MoeLayer::route_probs(const Tensor& probs, int64_t group_tokens, int ranks) const {
  RouteQuery query{.tokens = probs.dim(0),
                   .group_tokens = group_tokens,
                   .experts = experts,
                   .top_k = top_k,
                   .capacity = expert_capacity(capacity_factor, group_tokens, top_k, experts),
                   .ranks = ranks};
  if (!probs.has_data()) return balanced_routing(query);  // phantom: no values to route on
  if (!route)
    throw std::logic_error(
        "MoE layer: no routing function (GPTConfig::route is null: hand the model "
        "ex::selected_seams().moe.route where it is built)");
  const std::vector<float> values = probs.to_vector();
  query.probs = values;
  return route(query);
}

// Each local expert's MLP on its contiguous rows (GELU, or SwiGLU's gate | up): fc and the
// activation's output kept, the output returned.
Tensor MoeLayer::experts_forward(MoeActivations& a, MemCategory out_category) const {
  const int64_t rows = a.expert_rows.dim(0);
  const DType dt = a.expert_rows.dtype();
  a.fc = moe_tensor({rows, fc_weight.shape[1]}, MemCategory::activations, dt);  // H, or 2H
  a.fc_gelu = moe_tensor({rows, hidden}, MemCategory::activations, dt);
  Tensor out = moe_tensor({rows, dim}, out_category, dt);
  for_each_expert_rows(a.plan, [&](int e, int64_t r0, int64_t r1) {
    Tensor fc_rows = a.fc.rows(r0, r1);
    ops::linear_forward(fc_rows, a.expert_rows.rows(r0, r1), fc_weight.data.rows(e, e + 1),
                        expert_slice(fc_bias.data, e));
  });
  mlp_activation_forward(a.fc_gelu, a.fc, mlp);
  for_each_expert_rows(a.plan, [&](int e, int64_t r0, int64_t r1) {
    Tensor out_rows = out.rows(r0, r1);
    ops::linear_forward(out_rows, a.fc_gelu.rows(r0, r1), proj_weight.data.rows(e, e + 1),
                        expert_slice(proj_bias.data, e));
  });
  return out;
}

void MoeLayer::forward(Tensor& out, const Tensor& x, MoeActivations& a, const BlockComm& comm,
                       MoePass pass) const {
  const DType dt = x.dtype();
  ExpertComm* ec = comm.experts;
  const ExchangeSite site{.layer = layer, .pass = pass};
  a.probs = router_probs(x);
  a.routing = route_probs(a.probs, x.dim(1), ec ? ec->ranks() : 1);
  if (ec)
    with_phase_paused(comm.phase, [&] { a.plan = ec->plan(a.routing, experts, site); });
  else
    a.plan = local_plan(a.routing, experts);
  const std::vector<int32_t> tokens = token_of_rows(a.routing, top_k);
  const int64_t sent = int64_t(tokens.size());
  // Dispatch: the kept slots' rows in dispatch order, then to their experts' ranks.
  a.rows = moe_tensor({sent, dim}, ec ? MemCategory::comm_buffers : MemCategory::activations, dt);
  ops::gather_rows(a.rows, x, tokens);
  if (ec) {
    a.expert_rows = moe_tensor({a.plan.received_rows(), dim}, MemCategory::activations, dt);
    with_phase_paused(comm.phase, [&] { ec->to_experts(a.rows, a.expert_rows, a.plan, site); });
    a.rows = Tensor();  // sent: only the expert rows are kept
  } else {
    a.expert_rows = a.rows;
  }
  Tensor expert_out = experts_forward(a, ec ? MemCategory::comm_buffers : MemCategory::activations);
  // Combine: the outputs back to their tokens' ranks, then each token's weighted sum.
  if (ec) {
    a.y = moe_tensor({sent, dim}, MemCategory::activations, dt);
    with_phase_paused(comm.phase, [&] { ec->to_tokens(expert_out, a.y, a.plan, site); });
  } else {
    a.y = expert_out;
  }
  ops::combine_rows(out, a.y, tokens, weight_of_rows(a.routing));
  last = {.tokens_per_expert = a.routing.tokens_per_expert, .dropped = a.routing.dropped};
  if (a.probs.has_data())
    last.aux_loss =
        moe_aux_loss(a.probs.to_vector(), a.routing, x.dim(1), experts, top_k, aux_loss_coef);
}

// ---------------------------------------------------------------------------------- backward

// Each local expert's MLP backward on its rows: parameter grads +=, the rows' gradient returned.
Tensor MoeLayer::experts_backward(const Tensor& d_out, const MoeActivations& a,
                                  MemCategory in_category) {
  const int64_t rows = a.expert_rows.dim(0);
  const DType dt = d_out.dtype();
  // Expert e's linear backward on its rows: dx overwritten, its slice of the grads +=.
  auto linear_backward = [](Param& w, Param& b, int e, Tensor dx, const Tensor& dy,
                            const Tensor& x) {
    Tensor dw = w.grad.rows(e, e + 1), db = expert_slice(b.grad, e);
    ops::linear_backward(dx, dw, db, dy, x, w.data.rows(e, e + 1));
  };
  Tensor d_fc = moe_tensor(a.fc.shape(), MemCategory::workspace, dt);
  // GELU's gradient in place; SwiGLU's from [rows, H] into gate | up [rows, 2H].
  Tensor d_act =
      mlp == MlpKind::swiglu ? moe_tensor({rows, hidden}, MemCategory::workspace, dt) : d_fc;
  for_each_expert_rows(a.plan, [&](int e, int64_t r0, int64_t r1) {
    linear_backward(proj_weight, proj_bias, e, d_act.rows(r0, r1), d_out.rows(r0, r1),
                    a.fc_gelu.rows(r0, r1));
  });
  mlp_activation_backward(d_fc, a.fc, d_act, mlp);
  Tensor d_in = moe_tensor({rows, dim}, in_category, dt);
  for_each_expert_rows(a.plan, [&](int e, int64_t r0, int64_t r1) {
    linear_backward(fc_weight, fc_bias, e, d_in.rows(r0, r1), d_fc.rows(r0, r1),
                    a.expert_rows.rows(r0, r1));
  });
  return d_in;
}

// d probs from the combine weights' gradients (the renormalisation w = p / S over the token's
// top-k, S their sum: dp_j = (dw_j - sum_i dw_i w_i) / S) and from the aux loss; then the
// softmax and the router linear: router.grad += and dx +=.
void MoeLayer::router_backward(Tensor& dx, const Tensor& x, const MoeActivations& a,
                               std::span<const float> d_row_weight) {
  const int64_t n = a.probs.dim(0);
  std::vector<float> dp;  // on the host, where the routing is
  if (a.probs.has_data()) {
    const Routing& r = a.routing;
    const std::vector<float> p = a.probs.to_vector();
    std::vector<float> dw(r.expert.size(), 0.0f);
    dp.assign(size_t(n * experts), 0.0f);
    for (size_t i = 0; i < r.order.size(); ++i) dw[size_t(r.order[i])] = d_row_weight[i];
    for (int64_t t = 0; t < n; ++t) {
      const size_t s0 = size_t(t * top_k);
      float sum = 0.0f, dot = 0.0f;
      for (int c = 0; c < top_k; ++c) {
        sum += p[size_t(t * experts + r.expert[s0 + c])];
        dot += dw[s0 + c] * r.weight[s0 + c];
      }
      for (int c = 0; c < top_k; ++c)
        dp[size_t(t * experts + r.expert[s0 + c])] += (dw[s0 + c] - dot) / sum;
    }
    moe_aux_loss_grad(dp, r, x.dim(1), experts, top_k, aux_loss_coef * loss_grad_scale);
  }
  // Tensor::from copies the host values to the rank's device (a cuda rank's too).
  Tensor d_probs = dp.empty() ? moe_tensor({n, experts}, MemCategory::workspace, DType::f32)
                              : Tensor::from({n, experts}, dp, MemCategory::workspace);
  Tensor d_logits = moe_tensor({n, experts}, MemCategory::workspace, DType::f32);
  ops::softmax_backward(d_logits, a.probs, d_probs);
  ops::matmul(router.grad, d_logits, x, /*trans_a=*/true, false, /*beta=*/1.0f);  // [E,N]@[N,C]
  ops::matmul(dx, d_logits, router.data, false, false, /*beta=*/1.0f);            // dx +=
}

void MoeLayer::backward(Tensor& dx, const Tensor& dout, const Tensor& x, const MoeActivations& a,
                        const BlockComm& comm) {
  ExpertComm* ec = comm.experts;
  const ExchangeSite site{.layer = layer, .pass = MoePass::backward};
  const DType dt = dout.dtype();
  const MemCategory exchanged = ec ? MemCategory::comm_buffers : MemCategory::workspace;
  const std::vector<int32_t> tokens = token_of_rows(a.routing, top_k);
  const int64_t sent = int64_t(tokens.size());
  // Combine: out[t] = sum w * y, so dy = w * dout[t] and dw = <dout[t], y>.
  Tensor d_y = moe_tensor({sent, dim}, exchanged, dt);
  ops::gather_rows(d_y, dout, tokens, weight_of_rows(a.routing));
  std::vector<float> d_weight(size_t(sent), 0.0f);
  ops::gathered_row_dots(d_weight, dout, tokens, a.y);
  Tensor d_expert_out = d_y;  // the combine's exchange backward: to the experts
  if (ec) {
    d_expert_out = moe_tensor({a.plan.received_rows(), dim}, exchanged, dt);
    with_phase_paused(comm.phase, [&] { ec->to_experts(d_y, d_expert_out, a.plan, site); });
  }
  Tensor d_expert_rows = experts_backward(d_expert_out, a, exchanged);
  Tensor d_rows = d_expert_rows;  // the dispatch's exchange backward: back to the tokens
  if (ec) {
    d_rows = moe_tensor({sent, dim}, exchanged, dt);
    with_phase_paused(comm.phase, [&] { ec->to_tokens(d_expert_rows, d_rows, a.plan, site); });
  }
  ops::combine_rows(dx, d_rows, tokens);  // the dispatch's permutation backward: dx overwritten
  router_backward(dx, x, a, d_weight);
}

}  // namespace mgpu

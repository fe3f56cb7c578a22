// The mixture-of-experts layer (core/model/moe.h): router, routing, dispatch, experts, combine,
// and their backward read bottom-up.
#include "core/model/moe.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "core/model/gpt.h"

namespace mgpu {

// ---------------------------------------------------------------------------------- the rules

int64_t expert_capacity(double capacity_factor, int64_t group_tokens, int top_k, int experts) {
  if (capacity_factor == 0.0) return 0;
  return static_cast<int64_t>(
      std::ceil(capacity_factor * double(group_tokens) * top_k / double(experts)));
}

int64_t ExchangePlan::sent_rows() const {
  int64_t n = 0;
  for (int64_t v : send) n += v;
  return n;
}

int64_t ExchangePlan::received_rows() const {
  int64_t n = 0;
  for (int64_t v : recv) n += v;
  return n;
}

std::vector<int64_t> ExchangePlan::rows_per_local_expert() const {
  std::vector<int64_t> rows(size_t(local_experts), 0);
  for (int s = 0; s < ranks; ++s)
    for (int e = 0; e < local_experts; ++e) rows[size_t(e)] += recv[size_t(s * local_experts + e)];
  return rows;
}

// ---------------------------------------------------------------------------------- the layer

MoeLayer::MoeLayer(const GPTConfig& cfg, int index, const BlockShard& shard)
    : experts(cfg.experts),
      local_experts(shard.expert_parts > 0 ? cfg.experts / shard.expert_parts : 0),
      top_k(cfg.top_k),
      dim(cfg.dim),
      hidden(cfg.expert_hidden_size()),
      capacity_factor(cfg.capacity_factor),
      aux_loss_coef(cfg.aux_loss_coef),
      route(cfg.route) {
  if (shard.expert_parts < 1 || cfg.experts % shard.expert_parts != 0)
    throw std::invalid_argument(fmt::format(
        "MoE layer: {} experts do not split into {} equal parts (ep must divide experts)",
        cfg.experts, shard.expert_parts));
  const std::string p = fmt::format("blocks.{}.moe.", index);
  const int64_t e = local_experts, c = dim, h = hidden;
  // As the dense MLP: fc ~ N(0, 0.02), the projection into the residual scaled by depth.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  router = Param::declared(p + "router.weight", {experts, c}, ParamInit::normal(0.02f));
  fc_weight = Param::declared(p + "fc.weight", {e, h, c}, ParamInit::normal(0.02f));
  fc_bias = Param::declared(p + "fc.bias", {e, h}, ParamInit::constant(0.0f));
  proj_weight = Param::declared(p + "proj.weight", {e, c, h}, ParamInit::normal(residual_std));
  proj_bias = Param::declared(p + "proj.bias", {e, c}, ParamInit::constant(0.0f));
}

void MoeLayer::collect(ParamList& list) {
  for (Param* p : {&router, &fc_weight, &fc_bias, &proj_weight, &proj_bias}) list.push_back(p);
}

int64_t MoeActivations::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&probs, &rows, &expert_rows, &fc, &fc_gelu, &y}) total += t->bytes();
  return total;
}

void MoeLayer::forward(Tensor&, const Tensor&, MoeActivations&, const BlockComm&) const {
  throw std::logic_error("MoE layer: forward not written yet");
}

void MoeLayer::backward(Tensor&, const Tensor&, const Tensor&, const MoeActivations&,
                        const BlockComm&) {
  throw std::logic_error("MoE layer: backward not written yet");
}

}  // namespace mgpu

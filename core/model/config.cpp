// The model's description checked once, each mistake one line naming what would work.
#include "core/model/config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace mgpu {

const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  throw std::invalid_argument("unknown recompute mode '" + text +
                              "' (use none, selective or full)");
}

const char* norm_name(Norm n) {
  return n == Norm::layernorm ? "layernorm" : "rmsnorm";
}
const char* mlp_name(MlpKind m) {
  return m == MlpKind::gelu ? "gelu" : "swiglu";
}
const char* positions_name(Positions p) {
  return p == Positions::learned ? "learned" : "rope";
}

namespace {
// The divisors of `dim` up to 16, as "1, 2, 4, 8", for the error message.
std::string divisors_of(int dim) {
  std::string s;
  for (int h = 1; h <= std::min(dim, 16); h++)
    if (dim % h == 0) s += (s.empty() ? "" : ", ") + std::to_string(h);
  return s;
}
}  // namespace

void GPTConfig::validate() const {
  auto positive = [](const char* what, int v) {
    if (v <= 0)
      throw std::invalid_argument(
          fmt::format("GPT config: {} ({}) must be positive, e.g. {} 64", what, v, what));
  };
  positive("vocab", vocab);
  positive("seq_len", seq_len);
  positive("layers", layers);
  positive("dim", dim);
  positive("heads", heads);
  if (dim % heads != 0)
    throw std::invalid_argument(fmt::format(
        "GPT config: heads ({}) must divide dim ({}): try heads {}", heads, dim, divisors_of(dim)));
  validate_style();
  validate_experts();
}

void GPTConfig::validate_style() const {
  auto refuse = [](const std::string& line) { throw std::invalid_argument("GPT config: " + line); };
  if (style.kv_heads < 0 || (style.kv_heads > 0 && heads % style.kv_heads != 0)) {
    std::string works;
    for (int k = 1; k <= heads; ++k)
      if (heads % k == 0) works += (works.empty() ? "" : ", ") + std::to_string(k);
    refuse(
        fmt::format("kv_heads ({}) must divide the {} query heads (each kv head serves a group "
                    "of them): use {}",
                    style.kv_heads, heads, works));
  }
  if (style.ffn_dim < 0)
    refuse(fmt::format("ffn_dim ({}) must be >= 0 (0: 4 * dim), e.g. {}", style.ffn_dim, 4 * dim));
  if (rope() && head_size() % 2 != 0)
    refuse(
        fmt::format("rope rotates pairs of a head's channels, so the head size dim / heads "
                    "({} / {} = {}) must be even: change dim or heads",
                    dim, heads, head_size()));
  if (rope() && !(style.rope_theta > 1.0f && style.rope_theta <= 1e9f))
    refuse(
        fmt::format("rope_theta ({}) must be above 1 and at most 1e9, e.g. 10000 (Llama 2) or "
                    "500000 (Llama 3)",
                    style.rope_theta));
}

void GPTConfig::validate_experts() const {
  auto refuse = [](const std::string& line) { throw std::invalid_argument("GPT config: " + line); };
  if (experts < 0)
    refuse(fmt::format("experts ({}) must be >= 0 (0: the dense model), e.g. 4", experts));
  if (experts == 0) return;
  if (top_k < 1) refuse(fmt::format("top_k ({}) must be at least 1, e.g. top_k 2", top_k));
  if (top_k > experts)
    refuse(fmt::format("top_k ({}) must be at most experts ({}): try top_k {}", top_k, experts,
                       std::min(2, experts)));
  if (moe_every < 1)
    refuse(fmt::format("moe_every ({}) must be at least 1 (1: every block is MoE)", moe_every));
  if (moe_every > layers)
    refuse(
        fmt::format("moe_every ({}) is above the {} layers, so no block would be MoE: use 1 "
                    "to {}",
                    moe_every, layers, layers));
  if (!(capacity_factor >= 0.0 && capacity_factor <= kMaxCapacityFactor))
    refuse(
        fmt::format("capacity_factor ({}) must be from 0 (dropless) to {:g}, e.g. 1.25; a "
                    "factor of experts / top_k ({:g}) already keeps every token",
                    capacity_factor, kMaxCapacityFactor, double(experts) / top_k));
  if (expert_hidden < 0)
    refuse(fmt::format("expert_hidden ({}) must be >= 0 (0: 4 * dim)", expert_hidden));
  if (!(aux_loss_coef >= 0.0f && aux_loss_coef <= kMaxAuxLossCoef))
    refuse(
        fmt::format("aux_loss_coef ({}) must be from 0 to {:g}, e.g. 0.01 (a larger weight "
                    "drowns the language-model loss)",
                    aux_loss_coef, kMaxAuxLossCoef));
}

void refuse_experts(const GPTConfig& cfg, const std::string& layout, const std::string& instead) {
  if (cfg.experts > 0)
    throw std::invalid_argument(
        fmt::format("{} cannot run experts (--experts {}): {}", layout, cfg.experts, instead));
}

}  // namespace mgpu

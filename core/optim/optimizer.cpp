#include "core/optim/optimizer.h"

#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "core/ops/optimizer_kernels.h"

namespace mgpu::optim {

std::vector<ParamSlice> whole_params(const ParamList& params) {
  std::vector<ParamSlice> slices;
  for (Param* p : params) slices.push_back({p, 0, p->data.numel()});
  return slices;
}

Optimizer::Optimizer(std::vector<ParamSlice> slices, float lr)
    : slices_(std::move(slices)), lr_(lr) {
  for (const ParamSlice& s : slices_) {
    if (!s.param) throw std::invalid_argument("optimizer given a null parameter");
    if (s.begin < 0 || s.end < s.begin || s.end > s.param->data.numel())
      throw std::invalid_argument(
          fmt::format("optimizer slice [{}, {}) outside parameter {} of {} elements", s.begin,
                      s.end, s.param->name, s.param->data.numel()));
  }
}

void Optimizer::step() {
  // A resumed count comes from a file: never let ++ overflow (undefined behaviour).
  if (step_count_ >= std::numeric_limits<int64_t>::max() - 1)
    throw std::overflow_error(fmt::format("{}: step count {} cannot grow", name(), step_count_));
  ++step_count_;
  for (size_t i = 0; i < slices_.size(); ++i) update_slice(i);
}

void Optimizer::zero_grad() {
  std::set<Param*> done;  // several slices may share one parameter
  for (const ParamSlice& s : slices_)
    if (done.insert(s.param).second) s.param->grad.fill(0.0f);
}

int64_t Optimizer::state_bytes() const {
  int64_t total = 0;
  for (const NamedTensor& t : state_) total += t.tensor.bytes();
  return total;
}

Tensor Optimizer::add_state(const std::string& prefix, size_t i) {
  const ParamSlice& s = slices_[i];
  std::string name = prefix + "." + s.param->name;
  if (!s.whole()) name += fmt::format("[{}:{}]", s.begin, s.end);
  // Same device as the parameter: the current rank's allocator.
  Tensor t = Tensor::zeros({s.numel()}, MemCategory::optimizer_state);
  state_.push_back({name, t, static_cast<int>(i)});
  return t;
}

// ---- SGD --------------------------------------------------------------------------------------

SGD::SGD(std::vector<ParamSlice> slices, SGDOptions options)
    : Optimizer(std::move(slices), options.lr), options_(options) {
  for (size_t i = 0; i < slices_.size(); ++i)
    momentum_.push_back(options_.momentum != 0.0f ? add_state("sgd.momentum", i) : Tensor());
}

void SGD::update_slice(size_t i) {
  const ParamSlice& s = slices_[i];
  ops::sgd_momentum_update(s.data(), s.grad(), momentum_[i], lr_, options_.momentum,
                           options_.weight_decay);
}

nlohmann::json SGD::hyperparams() const {
  return {{"name", name()},
          {"lr", lr_},
          {"momentum", options_.momentum},
          {"weight_decay", options_.weight_decay}};
}

// ---- AdamW ------------------------------------------------------------------------------------

AdamW::AdamW(std::vector<ParamSlice> slices, AdamWOptions options)
    : Optimizer(std::move(slices), options.lr), options_(options) {
  for (size_t i = 0; i < slices_.size(); ++i) m_.push_back(add_state("adamw.m", i));
  for (size_t i = 0; i < slices_.size(); ++i) v_.push_back(add_state("adamw.v", i));
}

void AdamW::update_slice(size_t i) {
  const ParamSlice& s = slices_[i];
  ops::adamw_update(s.data(), s.grad(), m_[i], v_[i], lr_, options_.beta1, options_.beta2,
                    options_.eps, options_.weight_decay, step_count_);
}

nlohmann::json AdamW::hyperparams() const {
  return {{"name", name()},          {"lr", lr_},
          {"beta1", options_.beta1}, {"beta2", options_.beta2},
          {"eps", options_.eps},     {"weight_decay", options_.weight_decay}};
}

}  // namespace mgpu::optim

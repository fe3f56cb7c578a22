#include "core/optim/mixed_precision.h"

#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"

namespace mgpu::optim {

// ---- MixedPrecision -------------------------------------------------------------------------

namespace {
std::vector<ParamSlice> whole_slices(const std::vector<std::unique_ptr<Param>>& params) {
  std::vector<ParamSlice> slices;
  for (const auto& p : params) slices.push_back({p.get(), 0, p->data.numel()});
  return slices;
}
}  // namespace

MixedPrecision::MixedPrecision(std::vector<ParamSlice> slices, const Factory& make_inner)
    : Optimizer(std::move(slices), 0.0f) {
  for (const ParamSlice& s : slices_) {
    if (s.param->grad.dtype() != DType::f32)
      throw std::invalid_argument(
          fmt::format("mixed precision: gradient of {} is {}; gradients must be fp32",
                      s.param->name, dtype_name(s.param->grad.dtype())));
    auto master = std::make_unique<Param>();
    master->name = s.param->name;
    Shape shape = s.param->data.shape();
    if (!s.whole()) {
      master->name += fmt::format("[{}:{}]", s.begin, s.end);
      shape = {s.numel()};
    }
    master->data = Tensor::empty(shape, MemCategory::optimizer_state, DType::f32);
    ops::convert(master->data, s.data().reshape({s.numel()}));
    master->grad = s.grad().reshape(shape);  // the model's fp32 gradient, not a copy
    state_.push_back({"master." + master->name, master->data, static_cast<int>(masters_.size())});
    masters_.push_back(std::move(master));
  }
  inner_ = make_inner(whole_slices(masters_));
  lr_ = inner_->lr();
  for (const NamedTensor& t : inner_->state()) state_.push_back(t);
}

nlohmann::json MixedPrecision::hyperparams() const {
  nlohmann::json j = inner_->hyperparams();
  j["master_weights"] = "fp32";
  return j;
}

void MixedPrecision::step() {
  ++step_count_;
  inner_->set_lr(lr_);
  inner_->set_step_count(step_count_ - 1);  // inner step() counts this step
  inner_->step();
  copy_master_to_model();
}

ParamList MixedPrecision::master_params() {
  ParamList list;
  for (auto& m : masters_) list.push_back(m.get());
  return list;
}

void MixedPrecision::copy_master_to_model() {
  for (size_t i = 0; i < slices_.size(); ++i) {
    Tensor model = slices_[i].data();
    ops::convert(model, masters_[i]->data.reshape({slices_[i].numel()}));
  }
}

std::unique_ptr<Optimizer> make_adamw(std::vector<ParamSlice> slices, DType precision,
                                      AdamWOptions options) {
  if (precision == DType::f32) return std::make_unique<AdamW>(std::move(slices), options);
  return std::make_unique<MixedPrecision>(std::move(slices), [options](std::vector<ParamSlice> s) {
    return std::make_unique<AdamW>(std::move(s), options);
  });
}

// ---- LossScaler -----------------------------------------------------------------------------

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale) {
  if (!(options.initial_scale > 0) || !(options.growth_factor >= 1) ||
      !(options.backoff_factor > 0 && options.backoff_factor < 1) || options.growth_interval < 1)
    throw std::invalid_argument(
        "loss scaler: needs initial_scale > 0, growth_factor >= 1, 0 < backoff_factor < 1, "
        "growth_interval >= 1 (e.g. 65536, 2, 0.5, 2000)");
}

bool LossScaler::found_inf(const std::vector<ParamSlice>& slices,
                           const std::vector<comm::Comm*>& groups) {
  int64_t bad = 0;
  std::set<Param*> done;
  for (const ParamSlice& s : slices)
    if (done.insert(s.param).second) bad += ops::count_nonfinite(s.param->grad);
  if (groups.empty()) return bad > 0;
  // One float per group: sum of the ranks' flags, > 0 when any rank overflowed. (On the phantom
  // device there are no values: the all-reduce is timed, nothing overflows.)
  Tensor flag = Tensor::from({1}, {bad > 0 ? 1.0f : 0.0f}, MemCategory::comm_buffers);
  for (comm::Comm* group : groups) group->all_reduce(flag, comm::ReduceOp::sum);
  return flag.has_data() && flag.to_vector()[0] > 0.0f;
}

bool LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_ = 0;
  }
  return true;
}

bool LossScaler::step(Optimizer& optimizer, const std::vector<comm::Comm*>& groups) {
  const float used = scale_;  // the scale this step's gradients were computed with
  if (!update(found_inf(optimizer.slices(), groups))) return false;
  std::set<Param*> done;
  for (const ParamSlice& s : optimizer.slices())
    if (done.insert(s.param).second) ops::scale(s.param->grad, 1.0f / used);
  optimizer.step();
  return true;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_}, {"good_steps", clean_}, {"skipped_steps", skipped_}};
}

void LossScaler::load_state(const nlohmann::json& state) {
  const float scale = state.value("scale", 0.0f);
  const int64_t good = state.value("good_steps", int64_t{-1});
  if (!(scale > 0) || good < 0 || good >= options_.growth_interval)
    throw std::invalid_argument(
        fmt::format("loss scaler state {} is not a scale > 0 with 0 <= good_steps < {}",
                    state.dump(), options_.growth_interval));
  scale_ = scale;
  clean_ = good;
  skipped_ = state.value("skipped_steps", int64_t{0});
}

}  // namespace mgpu::optim

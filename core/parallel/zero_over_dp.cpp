// ZeRO over a mesh's dp group, top to bottom (see zero_over_dp.h for the idea):
//   1. cutting: every layer of the stage one flat unit, my chunk of it owned;
//   2. the step's start: buckets for the gradients (2-3), the parameters gathered (3);
//   3. the step's end: reduce-scatter, update my chunk, all-gather (1-2) or drop (3);
//   4. the map of my chunks into the full model.
#include "core/parallel/zero_over_dp.h"

#include <stdexcept>

#include <fmt/format.h>

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- cutting

ZeroOverDp::ZeroOverDp(int stage, comm::Comm& dp, const ZeroSeams& seams, const GPTConfig& cfg,
                       std::vector<ParamList> layers)
    : stage_(stage), dp_(dp), seams_(seams), dtype_(cfg.dtype) {
  if (stage_ < 1 || stage_ > 3)
    throw std::invalid_argument(fmt::format("ZeRO over dp shards stage 1, 2 or 3, got {}", stage));
  check_seams(seams_);
  for (ParamList& params : layers) {
    ZeroUnit u = plan_unit(std::move(params), dp.size(), dp.rank(), seams_.owned_chunk);
    if (stage_ < 3)
      materialise_unit(u, cfg.seed, cfg.dtype);
    else
      materialise_chunk(u, cfg.seed, cfg.dtype);
    if (stage_ == 1) {  // the whole gradient stays between steps
      u.flat_grads = Tensor::zeros({u.numel}, MemCategory::gradients);
      view_params(u, u.flat_grads, /*grads=*/true);
    } else {  // only my chunk of it; the whole one lives in a bucket during the step
      u.grad_shard = Tensor::zeros({u.end - u.begin}, MemCategory::gradients);
    }
    append_owned_slices(u, stage_ == 3 ? u.param_shard : u.flat_params,
                        stage_ == 1 ? u.flat_grads : u.grad_shard, owned_);
    units_.push_back(std::move(u));
  }
}

int64_t ZeroOverDp::owned_elements() const {
  int64_t n = 0;
  for (const ZeroUnit& u : units_) n += u.end - u.begin;
  return n;
}

// ---------------------------------------------------------------------------------- one step

void ZeroOverDp::begin_step() {
  if (stage_ == 1) return;
  if (stage_ == 3) {  // every unit on its way at once; the first micro-batch needs them all
    for (ZeroUnit& u : units_) gather_unit(u, dp_, dtype_);
    for (ZeroUnit& u : units_) attach_unit(u);
  }
  for (ZeroUnit& u : units_) open_bucket(u);
}

bool ZeroOverDp::end_step(const std::function<bool()>& update) {
  bool stepped = true;
  if (stage_ == 1) {  // exercise 08's step: reduce-scatter, update my chunk, all-gather
    std::vector<FlatUnit> units;
    for (ZeroUnit& u : units_) units.push_back({u.flat_params, u.flat_grads});
    seams_.sharded_step(dp_, units, [&] { stepped = update(); });
    return stepped;
  }
  for (ZeroUnit& u : units_) reduce_scatter_bucket(u, dp_);
  finish_reductions(units_);
  if (stage_ == 3)
    for (ZeroUnit& u : units_) release_unit(u);
  stepped = update();
  if (stage_ == 2) gather_updated_params(units_, dp_, dtype_);
  return stepped;
}

// ---------------------------------------------------------------------------------- the map

std::vector<train::TensorShard> ZeroOverDp::shards(
    optim::Optimizer* optimizer, const std::function<bool(const Param&)>& writes) {
  std::vector<train::TensorShard> shards =
      train::partitioned_shards(owned_params(owned_), optimizer, writes);
  if (stage_ < 3) {  // the whole local parameters too: a resume fills them (the owners write)
    ParamList whole;
    for (const ZeroUnit& u : units_) whole.insert(whole.end(), u.params.begin(), u.params.end());
    for (train::TensorShard& s : train::whole_tensor_shards(whole, nullptr, false))
      shards.push_back(std::move(s));
  }
  return shards;
}

}  // namespace mgpu::parallel

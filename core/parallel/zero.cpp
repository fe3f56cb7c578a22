// ZeRO step, top to bottom (see zero.h for the idea):
//   1. cutting: every layer becomes one flat unit; each rank keeps what its stage says of it;
//   2. forward layer by layer (stage 3: all-gather each unit just before it, free it after);
//   3. backward layer by layer; after each layer its gradient is averaged: all-reduce (stage 0)
//      or reduce-scatter into my chunk (stages 2-3), while backward goes on with earlier layers;
//      stage 1 reduce-scatters after backward, in its sharded step (exercise 08);
//   4. the optimizer updates only my chunk; stages 1-2 all-gather the updated parameters;
//   5. the map of my chunks into the full model, for gathered checkpoints.
#include "core/parallel/zero.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/data/sampler.h"
#include "core/model/init.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/layerwise.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- cutting

ZeroPart::ZeroPart(const GPTConfig& config, comm::Comm& dp, ZeroOptions options,
                   const ZeroSeams& seams)
    : config_(config), dp_(dp), options_(options), seams_(seams) {
  check_seams(seams_);
  if (options_.stage < 0 || options_.stage > 3)
    throw std::invalid_argument(
        fmt::format("ZeRO stage must be 0, 1, 2 or 3, got {}", options_.stage));
}

void ZeroPart::materialise(GPT& model, uint64_t seed, DType dtype) {
  const int stage = options_.stage;
  for (int layer = 0; layer < layer_count(model); ++layer) {
    ZeroUnit u = plan_unit(layer_params(model, layer), dp_.size(), dp_.rank(), seams_.owned_chunk);
    // Stages 0-2 keep the whole unit; stage 3 only its chunk, and never holds more of it.
    if (stage < 3)
      materialise_unit(u, seed, dtype);
    else
      materialise_chunk(u, seed, dtype);
    if (stage < 2) {  // the whole gradient stays
      u.flat_grads = Tensor::zeros({u.numel}, MemCategory::gradients);
      view_params(u, u.flat_grads, /*grads=*/true);
    } else {  // only my chunk of it; the whole one lives in a bucket during backward
      u.grad_shard = Tensor::zeros({u.end - u.begin}, MemCategory::gradients);
      for (Param* p : u.params) p->grad = Tensor();
    }
    if (stage >= 1)  // the slices of this unit's parameters that fall in my chunk
      append_owned_slices(u, stage == 3 ? u.param_shard : u.flat_params,
                          stage < 2 ? u.flat_grads : u.grad_shard, owned_);
    units_.push_back(std::move(u));
  }
}

ParamList ZeroPart::optimised(GPT& model) {
  if (options_.stage == 0) return model.params();  // the whole replica
  ParamList mine;                                  // otherwise my slices only
  for (OwnedSlice& s : owned_) mine.push_back(s.shard.get());
  return mine;
}

std::string ZeroPart::name() const {
  return "zero-" + std::to_string(options_.stage);
}

int64_t ZeroPart::owned_elements() const {
  int64_t n = 0;
  for (const ZeroUnit& u : units_) n += options_.stage == 0 ? u.numel : u.end - u.begin;
  return n;
}

void ZeroPart::report(train::RankReport& report) const {
  report.params_updated = owned_elements();
  train::ZeroFigures figures;
  for (const ZeroUnit& u : units_) figures.largest_unit = std::max(figures.largest_unit, u.numel);
  report.zero = figures;
}

std::unique_ptr<MeshLayout> zero_layout(const GPTConfig& config, comm::Comm& dp,
                                        ZeroOptions options,
                                        const train::OptimizerFactory& make_optimizer,
                                        const ZeroSeams& seams) {
  return std::make_unique<MeshLayout>(
      config, std::make_unique<ZeroPart>(config, dp, options, seams), make_optimizer);
}

// ---------------------------------------------------------------------------------- one step

data::Batch ZeroPart::share(const data::Batch& global_batch) {
  return data::split_micro_batches(global_batch, dp_.size())[dp_.rank()];
}

void ZeroPart::zero_grad(GPT&, optim::Optimizer&) {
  for (ZeroUnit& u : units_)
    if (u.flat_grads.defined()) u.flat_grads.fill(0.0f);
}

LayerHooks ZeroPart::layer_hooks(int last) {
  LayerHooks hooks;
  const bool prefetch = options_.prefetch;
  // Tied: the head (the last unit) reads the embedding unit's wte and adds to its gradient, so
  // stage 3 gathers unit 0 for the head too, and stages 2-3 open unit 0's bucket with the head's
  // and reduce it only after the embedding's backward.
  const bool tied = config_.tie_embeddings;
  if (options_.stage == 3) {
    // Each unit is whole only while it computes; with prefetch the next one is already on its
    // way, so its all-gather hides behind this unit's compute.
    hooks.before_forward = [=, this](int l) {
      gather(l);
      attach(l);
      if (tied && l == last) gather(0), attach(0);
      if (prefetch && l < last) gather(l + 1);
    };
    hooks.after_forward = [=, this](int l) {
      release(l);
      if (tied && l == last) release(0);
    };
    hooks.before_backward = [=, this](int l) {
      gather(l);
      attach(l);
      if (tied && l == last) gather(0), attach(0), open_bucket(0);
      if (prefetch && l > 0) gather(l - 1);
      if (!(tied && l == 0)) open_bucket(l);
    };
    hooks.after_backward = [=, this](int l) {
      reduce(l);
      release(l);
      if (tied && l == last) release(0);
    };
  } else if (options_.stage == 2) {  // each bucket reduce-scattered as backward finishes it
    hooks.before_backward = [=, this](int l) {
      if (tied && l == last) open_bucket(0);
      if (!(tied && l == 0)) open_bucket(l);
    };
    hooks.after_backward = [this](int l) { reduce(l); };
  } else if (options_.stage == 0) {  // DDP: each unit all-reduced as backward finishes it
    hooks.after_backward = [this](int l) { reduce(l); };
  }
  return hooks;
}

std::optional<float> ZeroPart::forward_backward(GPT& model, const data::Batch& mine, TracePhase&,
                                                float loss_scale) {
  const LayerHooks hooks = layer_hooks(layer_count(model) - 1);
  activations_ = GPTActivations::allocate(config_, mine.B, mine.T);
  const float loss = forward_by_layer(model, mine, *activations_, loss_scale, hooks);
  backward_by_layer(model, mine, *activations_, hooks);
  return loss;
}

void ZeroPart::synchronise(GPT&) {
  if (options_.stage != 1) finish_reductions(units_);  // stage 1 reduces in its sharded step
}

// Only my chunk is updated (stage 0: the whole replica). fp16: each rank checks only the gradient
// chunk it owns, so the found-inf flag is agreed over the dp group and a skipped step is skipped
// on every rank (the all-gather then hands back the unchanged parameters).
bool ZeroPart::step_optimizer(const std::function<bool()>& update) {
  if (options_.stage == 1) {  // after backward: reduce-scatter, update my chunk, all-gather
    bool stepped = true;
    std::vector<FlatUnit> flat;
    for (ZeroUnit& u : units_) flat.push_back({u.flat_params, u.flat_grads});
    seams_.sharded_step(dp_, flat, [&] { stepped = update(); });
    return stepped;
  }
  const bool stepped = update();
  if (options_.stage == 2) gather_updated_params(units_, dp_, config_.dtype);
  return stepped;
}

void ZeroPart::reduce(int unit) {
  ZeroUnit& u = units_[unit];
  switch (options_.stage) {
    case 0:
      u.reducing = dp_.all_reduce_async(u.flat_grads, comm::ReduceOp::avg);
      break;
    default:  // stages 2-3: the bucket goes as soon as its reduce-scatter is done
      reduce_scatter_bucket(u, dp_);
      // At most two buckets live at once: the previous layer's (in backward order) is done.
      if (unit < last_unit()) {
        ZeroUnit& previous = units_[unit + 1];
        previous.reducing.wait();
        previous.bucket = Tensor();
      }
  }
}

// ---------------------------------------------------------------------------------- shards

std::vector<train::TensorShard> ZeroPart::shards(GPT& model, optim::Optimizer* optimizer) {
  if (options_.stage == 0)
    return train::whole_tensor_shards(model.params(), optimizer, dp_.rank() == 0);
  // My slices: each writes its own elements of the full parameter (ZeRO cuts the whole model).
  std::vector<train::TensorShard> shards =
      train::partitioned_shards(owned_params(owned_), optimizer, [](const Param&) { return true; });
  // Stages 1-2 hold every parameter in full too: a resume fills them as well (not written).
  if (options_.stage < 3)
    for (train::TensorShard& s : train::whole_tensor_shards(model.params(), nullptr, false))
      shards.push_back(std::move(s));
  return shards;
}

}  // namespace mgpu::parallel

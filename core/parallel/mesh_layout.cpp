// The mesh engine's recipe, the same for every part: build the seeded model as the part cuts it,
// draw the parameters at their places in the single-device model, hand the blocks the part's
// communication; per step take the rank's share of the batch, forward and backward, synchronise
// the gradients and step the optimizer.
#include "core/parallel/mesh_layout.h"

#include <utility>

#include "core/model/init.h"
#include "core/parallel/mesh.h"

namespace mgpu::parallel {

MeshLayout::MeshLayout(const GPTConfig& cfg, std::unique_ptr<MeshPart> part,
                       const train::OptimizerFactory& make_optimizer, std::shared_ptr<Mesh> mesh)
    : config_(cfg), mesh_(std::move(mesh)), part_(std::move(part)) {
  BlockShard shard = BlockShard::whole(cfg);
  part_->shard_blocks(shard);
  // Every rank materialises only its share, drawn at its elements' places in the seeded
  // single-device model: a mesh run starts exactly where the single-device run starts.
  model_ = std::make_unique<GPT>(cfg, shard);
  part_->split(*model_);
  part_->materialise(*model_, cfg.seed, cfg.dtype);
  part_->attach(*model_, phase_);
  optimizer_ = make_optimizer(part_->optimised(*model_));
}

MeshLayout::~MeshLayout() = default;

train::StepOutcome MeshLayout::step(const data::Batch& global_batch, int step) {
  const data::Batch mine = part_->share(global_batch);
  part_->zero_grad(*model_, *optimizer_);
  std::optional<float> loss = part_->forward_backward(*model_, mine, phase_, loss_scale());
  std::optional<GPTActivations> acts;  // freed with the step, after the optimizer
  if (!loss) {
    acts = GPTActivations::allocate(config_, model_->shard(), mine.B, mine.T,
                                    model_->head.vocab_parts());
    phase_.open("forward", trace::cat::forward);
    loss = model_->forward(mine.tokens, mine.targets, *acts, loss_scale());
    phase_.open("backward", trace::cat::backward);
    model_->backward(mine.tokens, *acts);
    phase_.close();
  }
  part_->synchronise(*model_);
  const bool stepped = part_->step_optimizer(
      [&] { return optimizer_step(optimizer_.get(), part_->model_groups(), step); });
  part_->end_step();
  if (part_->loss_is_shard()) return {.shard_loss = *loss, .skipped = !stepped};
  return {.loss = *loss, .skipped = !stepped};
}

void MeshLayout::report(train::RankReport& report) {
  report.params_held = model_->num_params();
  report.params_updated = report.params_held;
  part_->report(report);
}

std::vector<train::TensorShard> MeshLayout::shards() {
  return part_->shards(*model_, optimizer_.get());
}

void MeshPart::materialise(GPT& model, uint64_t seed, DType dtype) {
  mgpu::materialise(model.params(), seed, dtype);
}

std::vector<train::TensorShard> MeshPart::shards(GPT& model, optim::Optimizer* optimizer) {
  return train::partitioned_shards(model.params(), optimizer,
                                   [this](const Param& p) { return writes(p); });
}

}  // namespace mgpu::parallel

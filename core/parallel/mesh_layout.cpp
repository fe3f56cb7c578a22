// The mesh engine's recipe, the same for every part: build the seeded model as the part cuts it,
// draw the parameters at their places in the single-device model, hand the blocks the part's
// communication; per step take the rank's share of the batch, forward and backward, synchronise
// the gradients and step the optimizer.
#include "core/parallel/mesh_layout.h"

#include <utility>

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
  materialise(model_->params(), cfg.seed, cfg.dtype);
  part_->attach(*model_, phase_);
  optimizer_ = make_optimizer(model_->params());
}

MeshLayout::~MeshLayout() = default;

train::StepOutcome MeshLayout::step(const data::Batch& global_batch, int step) {
  const data::Batch mine = part_->share(global_batch);
  optimizer_->zero_grad();
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
  const bool stepped = optimizer_step(optimizer_.get(), {&part_->model_group()}, step);
  if (part_->loss_is_shard()) return {.shard_loss = *loss, .skipped = !stepped};
  return {.loss = *loss, .skipped = !stepped};
}

std::vector<train::TensorShard> MeshLayout::shards() {
  return train::partitioned_shards(model_->params(), optimizer_.get(),
                                   [this](const Param& p) { return part_->writes(p); });
}

}  // namespace mgpu::parallel

// A pipeline stage's share of the model: only its layers are declared, each at its place in the
// seeded single-device model (see stage_model.h).
#include "core/parallel/pipeline/stage_model.h"

#include "core/model/init.h"

namespace mgpu::pipeline {

StageModel StageModel::build(const GPTConfig& config, int stage, int stages, int virtual_stages,
                             Placement placement) {
  StageModel m =
      declare(config, stage, stages, virtual_stages, BlockShard::whole(config), nullptr, placement);
  materialise(m.params(), config.seed, config.dtype);
  return m;
}

StageModel StageModel::declare(const GPTConfig& config, int stage, int stages, int virtual_stages,
                               const BlockShard& shard, const BlockSplit& split,
                               Placement placement) {
  StageModel m;
  m.placement = placement;
  m.config = config;
  m.shard = shard;
  m.stage = stage;
  m.stages = stages;
  m.virtual_stages = virtual_stages;
  // Only this stage's layers are declared; each is materialised (by the caller) at its place in
  // the seeded single-device model, so a stage holds exactly the single-device weights of its
  // layers and never the rest of the model.
  const LayerPartition partition =
      partition_layers(config.layers, model_parts(placement, stages, virtual_stages));
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    const auto [begin, end] = partition.ranges[virtual_stage(placement, stages, stage, chunk)];
    m.chunk_layers.emplace_back(begin, end);
    std::vector<Block> blocks;
    for (int layer = begin; layer < end; ++layer) {
      blocks.emplace_back(config, layer, shard);
      if (split) split(blocks.back());
    }
    m.chunks.push_back(std::move(blocks));
  }
  // The embedding goes with virtual stage 0, the head with the last (bidirectional: on both ends).
  const int last = model_parts(placement, stages, virtual_stages) - 1;
  auto holds = [&](int v) {
    for (int chunk = 0; chunk < virtual_stages; ++chunk)
      if (virtual_stage(placement, stages, stage, chunk) == v) return true;
    return false;
  };
  if (holds(0)) m.embedding.emplace(config);
  if (holds(last)) m.head.emplace(config);
  for (Param* p : m.params()) p->spec.stage = stage;
  return m;
}

ParamList StageModel::params() {
  ParamList list;
  if (embedding) embedding->collect(list);
  for (auto& blocks : chunks)
    for (Block& block : blocks) block.collect(list);
  if (head) head->collect(list);
  return list;
}

void StageModel::zero_grad() {
  for (Param* p : params()) p->grad.fill(0.0f);
}

int StageModel::num_layers() const {
  int n = 0;
  for (const auto& blocks : chunks) n += static_cast<int>(blocks.size());
  return n;
}

}  // namespace mgpu::pipeline

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
  if (holds(0)) m.embedding = std::make_unique<Embedding>(config);
  if (holds(last)) m.head.emplace(config);
  // Tied beside the embedding: the head reads this stage's wte (else lm_head is its copy).
  if (config.tie_embeddings && m.embedding && m.head) m.head->tied = &m.embedding->wte;
  for (Param* p : m.params()) p->spec.stage = stage;
  return m;
}

namespace {

// Calls fn on each layer of the stage in forward order: the embedding, the blocks of each chunk
// in `chunk_order` (empty: 0, 1, ...), the head.
template <class Fn>
void for_each_layer(StageModel& model, const std::vector<int>& chunk_order, Fn&& fn) {
  if (model.embedding) fn(*model.embedding);
  const int chunks = static_cast<int>(model.chunks.size());
  for (int i = 0; i < (chunk_order.empty() ? chunks : static_cast<int>(chunk_order.size())); ++i)
    for (Block& block : model.chunks[chunk_order.empty() ? i : chunk_order[i]]) fn(block);
  if (model.head) fn(*model.head);
}

}  // namespace

std::vector<ParamList> StageModel::layers(const std::vector<int>& chunk_order) {
  std::vector<ParamList> list;
  for_each_layer(*this, chunk_order, [&](auto& layer) {
    list.emplace_back();
    layer.collect(list.back());
  });
  return list;
}

ParamList StageModel::params(const std::vector<int>& chunk_order) {
  ParamList list;
  for_each_layer(*this, chunk_order, [&](auto& layer) { layer.collect(list); });
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

Param* StageModel::embedding_group_weight() {
  if (!config.tie_embeddings || (embedding && head)) return nullptr;
  if (embedding) return &embedding->wte;
  return head ? &head->lm_head.weight : nullptr;
}

std::unique_ptr<comm::Comm> make_embedding_group(StageModel& model, comm::Comm& pipeline) {
  if (!model.config.tie_embeddings || pipeline.size() == 1) return nullptr;
  // The middle stages join no group (color -1, MPI_UNDEFINED): split gives them null.
  const bool member = model.embedding_group_weight() != nullptr;
  return pipeline.split(member ? 0 : -1, pipeline.rank(), "embedding");
}

void all_reduce_embedding_grad(StageModel& model, comm::Comm* group) {
  if (!group) return;
  group->all_reduce(model.embedding_group_weight()->grad, comm::ReduceOp::sum);
}

void read_only_tied_copy(StageModel& model, std::vector<train::TensorShard>& shards) {
  if (!model.embedding_group_weight() || model.embedding) return;
  const std::string name = model.embedding_group_weight()->name;  // "embedding.wte"
  for (train::TensorShard& s : shards)
    if (s.full_name == name || s.full_name.ends_with("." + name)) s.writer = false;
}

}  // namespace mgpu::pipeline

// The part of the GPT one pipeline stage owns. Stage s holds the blocks of its chunks (chunk c of
// stage s is virtual stage schedule.virtual_stage(s, c)); the stage holding the first virtual stage
// also embeds the tokens, the one holding the last computes the loss. Nothing else of the model
// ever exists on the stage.
//
// Tied embeddings (Megatron-LM's embedding group): the first stage's wte and the last stage's
// head read one matrix. Each of the two stages keeps a copy, born equal (both seeded as
// "embedding.wte"); after backward the two gradients are summed by an all-reduce over the group
// {first stage, last stage}, once per step, so both copies take the same optimizer step and stay
// equal. A stage holding both (one stage, or a V's turn) reads its own wte: no copy, no group.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/train/layout.h"

namespace mgpu::pipeline {

// Built from the full model's config and seed, so every stage holds exactly the weights the
// single-device model has for the same layers (and nothing else).
struct StageModel {
  GPTConfig config;
  int stage = 0, stages = 1, virtual_stages = 1;
  Placement placement = Placement::ring;
  std::vector<std::pair<int, int>> chunk_layers;  // [begin, end) of global block indices, per chunk
  std::vector<std::vector<Block>> chunks;         // the blocks of each chunk
  // On the stage holding virtual stage 0 (on the heap: a tied head beside it points at its wte).
  std::unique_ptr<Embedding> embedding;
  std::optional<Head> head;  // on the stage holding the last virtual stage
  BlockShard shard;  // what each block computes: the whole block, or a tensor-parallel slice

  // This stage's layers, materialised (the single-device model's weights for them).
  static StageModel build(const GPTConfig& config, int stage, int stages, int virtual_stages = 1,
                          Placement placement = Placement::ring);
  // This stage's layers declared only (no memory): every block computes `shard`, and
  // `split(block)` sets how a layout splits it (hybrid: tensor parallelism). The caller
  // materialises the parameters (core/model/init.h) into whatever storage it keeps.
  using BlockSplit = std::function<void(Block& block)>;
  static StageModel declare(const GPTConfig& config, int stage, int stages, int virtual_stages,
                            const BlockShard& shard, const BlockSplit& split,
                            Placement placement = Placement::ring);
  // This stage's layers in forward order, each its own parameters: the embedding, the blocks of
  // each chunk (in `chunk_order`; empty: 0, 1, ...), the head. ZeRO's units are these layers.
  std::vector<ParamList> layers(const std::vector<int>& chunk_order = {});
  ParamList params(const std::vector<int>& chunk_order = {});  // layers() in one list
  void zero_grad();
  int num_layers() const;
  // The copy of the tied matrix whose gradient this stage sums over the embedding group, or null
  // when it is not in one (untied, or the embedding and the head both here).
  Param* embedding_group_weight();
};

// The embedding group of a pipeline over `stages` (every stage calls it: it splits `pipeline`):
// {first stage, last stage} when `model` is tied across stages, else null.
std::unique_ptr<comm::Comm> make_embedding_group(StageModel& model, comm::Comm& pipeline);

// Sums the tied matrix's gradient over the embedding group (once per step, after backward; a
// no-op without a group). Megatron-LM's _allreduce_embedding_grads.
void all_reduce_embedding_grad(StageModel& model, comm::Comm* group);

// A checkpoint stores the tied matrix once: the first stage's. On the last stage the copy and its
// optimizer state become read-only shards (a resume fills them; they write nothing).
void read_only_tied_copy(StageModel& model, std::vector<train::TensorShard>& shards);

}  // namespace mgpu::pipeline

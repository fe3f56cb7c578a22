// The part of the GPT one pipeline stage owns. Stage s holds the blocks of its chunks (chunk c of
// stage s is virtual stage schedule.virtual_stage(s, c)); the stage holding the first virtual stage
// also embeds the tokens, the one holding the last computes the loss. Nothing else of the model
// ever exists on the stage.
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/model/gpt.h"
#include "core/parallel/pipeline/schedule.h"

namespace mgpu::pipeline {

// Built from the full model's config and seed, so every stage holds exactly the weights the
// single-device model has for the same layers (and nothing else).
struct StageModel {
  GPTConfig config;
  int stage = 0, stages = 1, virtual_stages = 1;
  Placement placement = Placement::ring;
  std::vector<std::pair<int, int>> chunk_layers;  // [begin, end) of global block indices, per chunk
  std::vector<std::vector<Block>> chunks;         // the blocks of each chunk
  std::optional<Embedding> embedding;             // on the stage holding virtual stage 0
  std::optional<Head> head;                       // on the stage holding the last virtual stage
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
  ParamList params();  // embedding, chunks in order, head (only what this stage owns)
  void zero_grad();
  int num_layers() const;
};

}  // namespace mgpu::pipeline

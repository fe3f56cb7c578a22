// The pipeline executor: runs ANY valid Schedule with real activations and gradients. Each rank is
// one stage and owns the blocks of its chunks (chunk c of stage s = virtual stage c*P + s; the
// first virtual stage also embeds the tokens, the last computes the loss). It walks its action
// list in order: forwards receive an activation, run their blocks and send the result on; backwards
// receive a gradient, run the blocks' backward and send the input gradient back. Sends are async
// (isend, waited at the end of the step), receives block: that is exactly what makes bubbles.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/train/trainer.h"

namespace mgpu::pipeline {

// THEORY MODE. With a real profile the stage that embeds or owns the head does extra work, so its
// bubbles do not match the closed-form formulas (which assume equal stages). In theory mode the
// executor charges every compute action a fixed modeled time instead: forward = forward/V and
// backward = backward/V per chunk (the costs are for a whole stage's micro-batch), so all stages
// are equal by construction. The math still runs for real (gradients stay exact); only the
// clock is replaced, so the world must use free kernels (HardwareProfile::ideal(0)) and free links.
struct TheoryCosts {
  double forward = 1.0;   // seconds per micro-batch on a whole stage
  double backward = 2.0;  // full backward (input + weight gradients); zero-bubble's B and W
                          // each cost half, so F = B = W as the ZB-H1 formula assumes
};

struct ExecutorOptions {
  std::optional<TheoryCosts> theory;  // empty: time comes from the kernels and the profile
  float loss_scale = 1.0f;            // fp16: the loss is multiplied by this before backward
};

// The part of the GPT one stage owns. Built from the full model's config and seed, so every stage
// holds exactly the weights the single-device model has for the same layers (and nothing else).
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

// What one step measured on one stage.
struct StageStepStats {
  float loss = 0;                     // mean loss over the global batch (last stage only)
  int peak_stashed = 0;               // most (micro-batch, chunk) sets forwarded, not yet B'd
  int64_t stash_bytes = 0;            // bytes of the largest single (micro-batch, chunk) set
  int64_t peak_activation_bytes = 0;  // allocator high-water mark of activations in the step
};

// Runs `schedule`'s action list for this rank's stage (stage = comm.rank()) over the given
// micro-batches. Gradients ACCUMULATE into the stage's parameters (zero them first); each
// micro-batch's loss is scaled by 1/M, so the sum over micro-batches is the global-batch mean.
StageStepStats run_schedule(StageModel& model, const Schedule& schedule,
                            const std::vector<data::Batch>& microbatches, comm::Comm& comm,
                            const ExecutorOptions& options = {});

// One training step: barrier (all stages start together, so steps do not overlap on the
// timeline), StepScope, zero_grad, run_schedule, optimizer step on this stage's own parameters.
StageStepStats train_step(StageModel& model, optim::Optimizer& optimizer, const Schedule& schedule,
                          const data::Batch& batch, comm::Comm& comm, int step,
                          const ExecutorOptions& options = {});

// A pipeline as the trainer runs it: this rank's stage of the model, its optimizer, the schedule
// (whose chunks and placement decide which layers the stage holds: `virtual_stages` must match).
// Before each step, outside its window, a barrier lines the stages up (see train_step); the
// last stage reports the loss. Every stage writes its own whole tensors into checkpoints.
class PipelineLayout : public train::Layout {
 public:
  PipelineLayout(const GPTConfig& config, comm::Comm& comm, Schedule schedule, int virtual_stages,
                 const train::OptimizerFactory& make_optimizer, ExecutorOptions options = {});
  std::string name() const override { return "pipeline"; }
  void before_step(int step) override;
  train::StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<train::TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  const StageStepStats& last_stats() const { return stats_; }
  StageModel& stage() { return stage_; }

 private:
  comm::Comm& comm_;
  StageModel stage_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  Schedule schedule_;
  ExecutorOptions options_;
  StageStepStats stats_;
};

}  // namespace mgpu::pipeline

// The pipeline layout: this rank's stage of the model (stage_model.h), its optimizer, and the
// schedule the executor runs each step (executor.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/parallel/pipeline/executor.h"
#include "core/parallel/pipeline/mirror_gradients.h"
#include "core/train/trainer.h"

namespace mgpu::pipeline {

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
  std::unique_ptr<comm::Comm> embedding_group_;  // tied across stages: {first, last}, else null
  std::unique_ptr<optim::Optimizer> optimizer_;
  Schedule schedule_;
  ExecutorOptions options_;
  StageStepStats stats_;
  std::unique_ptr<MirrorGradients> mirror_;  // DualPipe's pair of copies, else null
};

}  // namespace mgpu::pipeline

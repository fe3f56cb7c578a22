// The mesh engine for runs without a pipeline: every rank holds a model built from the same seeded
// single-device model and runs one forward and one backward per step. What makes a run tensor,
// sequence, context or expert parallel is its *part* over a mesh axis (MeshPart): how the part
// shards each block and parameter, the communication it gives the blocks, the rank's share of the
// batch, how it synchronises the gradients, and which ranks write each tensor into the checkpoint.
// The engine holds the recipe every part shares: build, split, materialise, attach, step, map.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/model/trace_phase.h"
#include "core/optim/optimizer.h"
#include "core/train/layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

class Mesh;

// One parallelism over a mesh axis, as the mesh engine composes it. Each hook has the engine's
// order: shard_blocks, (the model is built) split, materialise, attach, optimised, then per step
// share, zero_grad, forward_backward, synchronise, step_optimizer, end_step.
class MeshPart {
 public:
  virtual ~MeshPart() = default;
  // The layout's name (the checkpoint's and the trainer's messages): "tensor_parallel", ...
  virtual std::string name() const = 0;
  // How every block is cut, before the model is built.
  virtual void shard_blocks(BlockShard& shard) const { (void)shard; }
  // Declares the built model's split parameters (their PartitionSpec), before they are drawn.
  virtual void split(GPT& model) { (void)model; }
  // Draws this rank's parameters at their places in the seeded single-device model (default:
  // each parameter the model holds; ZeRO: straight into the flat units, or chunks, it keeps).
  virtual void materialise(GPT& model, uint64_t seed, DType dtype);
  // After the parameters are drawn: the blocks' (and head's) communication and any per-rank
  // settings of the model, with the forward/backward region the blocks pause while they talk.
  virtual void attach(GPT& model, TracePhase& phase) = 0;
  // The parameters this rank's optimizer updates (default: the model's; ZeRO: its slices).
  virtual ParamList optimised(GPT& model) { return model.params(); }
  // This rank's share of the global batch (default: all of it).
  virtual data::Batch share(const data::Batch& global_batch) { return global_batch; }
  // Before the forward: the gradients the backward accumulates into, zeroed (default: the
  // optimizer's parameters').
  virtual void zero_grad(GPT& model, optim::Optimizer& optimizer) {
    (void)model;
    optimizer.zero_grad();
  }
  // Runs forward and backward itself (with its own activations) when they need more than the
  // model's own passes: sequence parallelism's cuts and gathers, DDP's buckets launched between
  // layers and its micro-steps. nullopt: the engine runs the model's passes.
  virtual std::optional<float> forward_backward(GPT& model, const data::Batch& mine,
                                                TracePhase& phase, float loss_scale) {
    (void)model, (void)mine, (void)phase, (void)loss_scale;
    return std::nullopt;
  }
  // After the backward: the gradients made what the optimizer needs on this rank.
  virtual void synchronise(GPT& model) { (void)model; }
  // The optimizer step with what the part does around it (ZeRO: the all-gather of the updated
  // chunks): `update` runs the optimizer (fp16: after the found-inf agreement) and says whether
  // it stepped.
  virtual bool step_optimizer(const std::function<bool()>& update) { return update(); }
  // After the optimizer: what the part kept to the step's end (ZeRO: its activations) goes.
  virtual void end_step() {}
  // The groups over which every rank holding a part of the model agrees on fp16's found-inf
  // flag (none on a single device).
  virtual std::vector<comm::Comm*> model_groups() = 0;
  // Whether this rank's loss is its share's mean (the trainer averages the shares) rather than
  // the whole batch's.
  virtual bool loss_is_shard() const { return false; }
  // Whether this rank writes `p` (and its optimizer state) into the gathered checkpoint.
  virtual bool writes(const Param& p) const = 0;
  // This rank's figures for the run's report (default: none beyond the engine's; the engine has
  // set params_updated to the model's parameters).
  virtual void report(train::RankReport& report) const { (void)report; }
  // This rank's tensors mapped into the full model (default: the model's parameters and their
  // optimizer state, written where `writes` says).
  virtual std::vector<train::TensorShard> shards(GPT& model, optim::Optimizer* optimizer);
};

// One rank of a mesh run without a pipeline, as the training loop sees it (core/train/layout.h).
class MeshLayout : public train::Layout {
 public:
  // Collective only in that every rank builds its own share of the same seeded model. The part's
  // groups must outlive the layout; `mesh`, when given, is the mesh they come from, kept here.
  MeshLayout(const GPTConfig& cfg, std::unique_ptr<MeshPart> part,
             const train::OptimizerFactory& make_optimizer, std::shared_ptr<Mesh> mesh = nullptr);
  ~MeshLayout() override;

  std::string name() const override { return part_->name(); }
  train::StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<train::TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  void report(train::RankReport& report) override;

  GPT& model() { return *model_; }
  MeshPart& part() { return *part_; }

 private:
  // The forward/backward region on the timeline; the blocks pause it while they communicate.
  TracePhase phase_;
  GPTConfig config_;
  std::shared_ptr<Mesh> mesh_;
  std::unique_ptr<MeshPart> part_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace mgpu::parallel

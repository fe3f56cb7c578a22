// The one training loop. Every paradigm trains through it: the trainer builds the paradigm's
// Layout on each rank of a World (threads or MPI processes), samples the same seeded global batch
// every step, runs layout.step inside a StepScope, and afterwards gathers the loss log and (with
// a checkpoint path) every rank's shards into the full single-device model on rank 0.
//
// How a paradigm plugs in: as a part of the mesh engine (core/parallel/mesh_layout.h) and an
// alternative of the run spec, whose factory builds it on each rank (core/run/run.h); lessons and
// the planner go through run(spec). Checkpoints, resume, losses, the ranks' reports and the trace
// then come for free, and match every other paradigm's.
//
//   train::TrainOptions opt{.steps = 20, .global_batch = 16, .seq = 32, ...};
//   train::TrainResult r = train::train(world, task, opt, [&](RankContext& ctx) {
//     return run::make_layout(spec, ctx);
//   });
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/checkpoint.h"
#include "core/model/param.h"
#include "core/optim/optimizer.h"
#include "core/train/layout.h"
#include "core/train/rank_report.h"
#include "core/world/world.h"

namespace mgpu::train {

struct TrainOptions {
  int steps = 1;         // train until this many steps are done (a resumed run continues)
  int global_batch = 1;  // sequences per optimizer step, over all ranks
  int seq = 1;
  std::string resume;         // a checkpoint to start from ("" = fresh)
  std::string checkpoint;     // where to write the gathered model at the end ("" = nowhere)
  int checkpoint_every = 0;   // also write it after every N-th step (0: at the end only)
  nlohmann::json config;      // saved in the checkpoint header (the run's options)
  int64_t model_params = -1;  // the full model's parameter count, checked against --resume
  // The model's shape options, named as the command line names them ({"layers": 2, "dim": 64,
  // "heads": 4, "seq": 32, "vocab": 16}): saved in the checkpoint, and a resumed checkpoint's
  // must agree field by field (null: not compared).
  nlohmann::json model;
  // fp16: dynamic loss scaling in the layout (its state is saved in and resumed from checkpoints).
  std::optional<LossScaling> loss_scaling;
  // After the last step: every rank's RankReport on the root (TrainResult::ranks).
  bool report_ranks = false;
  // After the last step: the full model's trained parameters on the root (TrainResult::params),
  // placed as a checkpoint places them (fp32 masters under mixed precision; devices with values).
  bool keep_params = false;
};

struct TrainResult {
  int first_step = 0;         // > 0 when resumed
  std::vector<float> losses;  // per step run, global-batch means (root process; empty on phantom)
  bool checkpoint_written = false;
  // With loss scaling (devices with values): the steps every rank skipped on inf/NaN, and the
  // scale after the last step.
  std::vector<int> skipped_steps;
  float loss_scale = 0;  // 0 = no loss scaling
  // Resumed from a parameters-only checkpoint (its optimizer entry is null): the optimizer
  // started fresh (zero state, step count 0).
  bool fresh_optimizer = false;
  std::vector<RankReport> ranks;         // report_ranks: by rank (root process)
  std::vector<CheckpointTensor> params;  // keep_params: the full model's parameters (root)
};

// Training diverged: a non-finite loss or parameter after a step (outside fp16's skipped steps).
// Raised on every rank that sees it, before any checkpoint is written; a fault of the run (the
// CLI's exit code 1), not bad input, though its message names the likely option to change.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A rank was lost (--fail-rank): what() is the one line the job ends with (the rank, the step,
// the checkpoint to resume from). A fault of the run: the CLI's exit code 1.
class JobInterrupted : public std::runtime_error {
 public:
  JobInterrupted(int rank, int step, int resumable_step, const std::string& what)
      : std::runtime_error(what), rank_(rank), step_(step), resumable_step_(resumable_step) {}
  int rank() const { return rank_; }
  int step() const { return step_; }
  int resumable_step() const { return resumable_step_; }  // the step its checkpoint holds

 private:
  int rank_, step_, resumable_step_;
};

// Builds a rank's optimizer over the parameters it updates (the lesson's --optimizer, --lr, ...).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const ParamList&)>;
using LayoutFactory = std::function<std::unique_ptr<Layout>(RankContext&)>;
// Called on the rank holding each step's global loss as soon as it is known, on the root process
// (progress printing); steps whose loss is only known after the gather are reported then.
using LossCallback = std::function<void(int step, float loss)>;
// Called on every rank after the last step, with the layout still alive (lesson-specific stats).
using RankDone = std::function<void(RankContext&, Layout&)>;

// Throws std::invalid_argument (one line) for a checkpoint of a device without values (phantom).
void check_checkpoint_device(DeviceKind device, const TrainOptions& options);

TrainResult train(World& world, const data::Task& task, const TrainOptions& options,
                  const LayoutFactory& factory, const LossCallback& on_loss = {},
                  const RankDone& on_done = {});

// Every parameter (its fp32 master weights under optim::MixedPrecision) and its optimizer state,
// placed in the full model by each parameter's PartitionSpec. `writes(p)`: whether this rank's
// copy of p is the one the checkpoint takes (one writer per element).
using WritesFn = std::function<bool(const Param&)>;
std::vector<TensorShard> partitioned_shards(const ParamList& params, optim::Optimizer* optimizer,
                                            const WritesFn& writes);

// Whole-tensor shards of a rank that holds complete parameters (single device, DDP replicas,
// pipeline stages) and the optimizer state over them. `writer`: this rank's copy is the one the
// checkpoint takes (replicas: rank 0 only).
// With optim::MixedPrecision the "param" shards are its fp32 master weights (what checkpoints
// store), and resume rounds them into the model.
std::vector<TensorShard> whole_tensor_shards(const ParamList& params, optim::Optimizer* optimizer,
                                             bool writer);

// Reads --resume once per process, validated (throws std::invalid_argument, one line).
CheckpointContents read_resume_checkpoint(const TrainOptions& options);

}  // namespace mgpu::train

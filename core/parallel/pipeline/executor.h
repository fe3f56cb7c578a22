// The pipeline executor: runs ANY valid Schedule with real activations and gradients. Each rank is
// one stage and owns the blocks of its chunks (chunk c of stage s = virtual stage c*P + s; the
// first virtual stage also embeds the tokens, the last computes the loss). It walks its action
// list in order: forwards receive an activation, run their blocks and send the result on; backwards
// receive a gradient, run the blocks' backward and send the input gradient back. Sends are async
// (isend, waited at the end of the step), receives block: that is exactly what makes bubbles.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/optim/optimizer.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/stage_model.h"

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
  // Sequence parallelism (the stage's blocks hold T / tp tokens, shard.seq_parts = tp): the tp
  // group; the embedding's output is cut to my tokens and the head's input all-gathered, as the
  // sequence_parallel layout does. Null: whole sequences.
  comm::Comm* sequence_parallel = nullptr;
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

}  // namespace mgpu::pipeline

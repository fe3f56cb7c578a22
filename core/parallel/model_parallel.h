// Naive model parallelism: cut the model's blocks into P contiguous groups, one per rank, and push
// the whole batch through them one rank after another (forward 0 -> P-1, backward P-1 -> 0).
// Communication: one activation send per stage boundary on the way down, one gradient send on
// the way back. Correct, and it fits a model P times larger, but at any moment exactly one rank
// works: the other P-1 wait, a bubble of (P-1)/P. Pipelining (pipeline/executor.h) fixes that.
#pragma once
#include "core/parallel/pipeline/executor.h"

namespace mgpu::parallel {

// This rank's blocks of the naive split (rank 0 also embeds, the last rank owns the head).
pipeline::StageModel model_parallel_stage(const GPTConfig& config, comm::Comm& comm);

// One step of naive model parallelism: the naive schedule (one micro-batch) on the executor.
pipeline::StageStepStats model_parallel_step(pipeline::StageModel& stage,
                                             optim::Optimizer& optimizer, const data::Batch& batch,
                                             comm::Comm& comm, int step,
                                             const pipeline::ExecutorOptions& options = {});

}  // namespace mgpu::parallel

// Naive model parallelism is the pipeline executor with the simplest schedule there is: every
// stage runs F0 then B0. The whole batch is one "micro-batch", so nothing overlaps.
#include "core/parallel/model_parallel.h"

namespace mgpu::parallel {

pipeline::StageModel model_parallel_stage(const GPTConfig& config, comm::Comm& comm) {
  return pipeline::StageModel::build(config, comm.rank(), comm.size());
}

pipeline::StageStepStats model_parallel_step(pipeline::StageModel& stage,
                                             optim::Optimizer& optimizer, const data::Batch& batch,
                                             comm::Comm& comm, int step,
                                             const pipeline::ExecutorOptions& options) {
  const pipeline::Schedule schedule = pipeline::naive_model_parallel_schedule(comm.size());
  return pipeline::train_step(stage, optimizer, schedule, batch, comm, step, options);
}

}  // namespace mgpu::parallel

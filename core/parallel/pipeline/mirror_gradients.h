// DualPipe's two copies of the model (schedule_dualpipe.cpp): stages s and P-1-s hold the same two
// parts (s going down, P-1-s going up, and the mirror the other way round), each part's gradient
// summing only its own direction's micro-batches. After the schedule the pair all-reduces them,
// one message each way of the stage's whole gradient, so both copies take the same update.
#pragma once
#include <memory>

#include "core/comm/comm.h"
#include "core/parallel/pipeline/stage_model.h"

namespace mgpu::pipeline {

class MirrorGradients {
 public:
  // Splits the pipeline group into the pairs {s, P-1-s}: every stage of `pipe` calls it.
  explicit MirrorGradients(comm::Comm& pipe);
  // Sums this stage's gradients with its mirror's, part by part (the order both stages list them).
  void all_reduce(StageModel& model);
  // The stages holding a head each saw half of the micro-batches' loss: their sum, on both.
  float loss(float half);

 private:
  std::unique_ptr<comm::Comm> pair_;
};

}  // namespace mgpu::pipeline

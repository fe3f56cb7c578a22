// The all-reduce of DualPipe's two copies of each part (see mirror_gradients.h).
#include "core/parallel/pipeline/mirror_gradients.h"

#include <algorithm>

#include "core/parallel/flat_gradients.h"

namespace mgpu::pipeline {

namespace {

// Stage s < P/2 lists its chunks down (part s), up (part P-1-s); its mirror holds the same parts
// in the other chunks, so it lists chunk 1 first: both then walk the parts in the same order.
ParamList in_part_order(StageModel& model) {
  const bool lower_half = model.stage < model.stages / 2;
  return model.params(lower_half ? std::vector{0, 1} : std::vector{1, 0});
}

}  // namespace

MirrorGradients::MirrorGradients(comm::Comm& pipe)
    : pair_(pipe.split(std::min(pipe.rank(), pipe.size() - 1 - pipe.rank()), pipe.rank(),
                       "mirror")) {}

void MirrorGradients::all_reduce(StageModel& model) {
  parallel::all_reduce_gradients(in_part_order(model), *pair_);
}

float MirrorGradients::loss(float half) {
  Tensor t = Tensor::from({1}, {half}, MemCategory::comm_buffers);
  pair_->all_reduce(t);
  return t.has_data() ? t.to_vector()[0] : half;  // a phantom device has shapes, no values
}

}  // namespace mgpu::pipeline

// The all-reduce of DualPipe's two copies of each part (see mirror_gradients.h).
#include "core/parallel/pipeline/mirror_gradients.h"

#include <algorithm>

namespace mgpu::pipeline {

namespace {

// Stage s < P/2 lists its chunks down (part s), up (part P-1-s); its mirror holds the same parts
// in the other chunks, so it lists chunk 1 first: both then walk the parts in the same order.
ParamList in_part_order(StageModel& model) {
  ParamList list;
  if (model.embedding) model.embedding->collect(list);
  const bool lower_half = model.stage < model.stages / 2;
  for (int chunk : lower_half ? std::vector{0, 1} : std::vector{1, 0})
    for (Block& block : model.chunks[chunk]) block.collect(list);
  if (model.head) model.head->collect(list);
  return list;
}

}  // namespace

MirrorGradients::MirrorGradients(comm::Comm& pipe)
    : pair_(pipe.split(std::min(pipe.rank(), pipe.size() - 1 - pipe.rank()), pipe.rank(),
                       "mirror")) {}

void MirrorGradients::all_reduce(StageModel& model) {
  const ParamList params = in_part_order(model);
  int64_t total = 0;
  for (const Param* p : params) total += p->grad.numel();
  Tensor flat = Tensor::empty({total}, MemCategory::comm_buffers);
  int64_t offset = 0;
  for (const Param* p : params) {
    flat.flat_range(offset, offset + p->grad.numel()).copy_from(p->grad);
    offset += p->grad.numel();
  }
  pair_->all_reduce(flat);
  offset = 0;
  for (Param* p : params) {
    p->grad.copy_from(flat.flat_range(offset, offset + p->grad.numel()));
    offset += p->grad.numel();
  }
}

float MirrorGradients::loss(float half) {
  Tensor t = Tensor::from({1}, {half}, MemCategory::comm_buffers);
  pair_->all_reduce(t);
  return t.has_data() ? t.to_vector()[0] : half;  // a phantom device has shapes, no values
}

}  // namespace mgpu::pipeline

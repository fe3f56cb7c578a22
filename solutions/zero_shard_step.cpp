// Exercise 08, reference: ZeRO stage 1's sharded optimizer step. An all-reduce is a
// reduce-scatter followed by an all-gather; stage 1 puts the optimizer between the two halves, so
// each rank updates (and keeps optimizer state for) only the chunk the reduce-scatter left it.
#include "core/parallel/zero.h"

#include "exercises/exercises.h"

namespace mgpu::reference {

std::pair<int64_t, int64_t> zero_owned_chunk(int64_t numel, int ranks, int rank) {
  const int64_t base = numel / ranks, extra = numel % ranks;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

void zero_sharded_step(comm::Comm& dp, const std::vector<parallel::FlatUnit>& units,
                       const std::function<void()>& update_owned) {
  std::vector<std::pair<int64_t, int64_t>> owned;
  for (const parallel::FlatUnit& u : units)
    owned.push_back(zero_owned_chunk(u.grads.numel(), dp.size(), dp.rank()));
  // 1. Reduce-scatter: the mean of my chunk lands in a small buffer, then in its place in the
  //    gradient. (Buffers stay alive and in place until every reduction is done.)
  std::vector<Tensor> mean;
  std::vector<comm::Work> work;
  mean.reserve(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    mean.push_back(Tensor::empty({owned[i].second - owned[i].first}, MemCategory::comm_buffers));
    work.push_back(dp.reduce_scatter_async(units[i].grads, mean.back(), comm::ReduceOp::avg));
  }
  for (size_t i = 0; i < units.size(); ++i) {
    work[i].wait();
    units[i].grads.flat_range(owned[i].first, owned[i].second).copy_from(mean[i]);
  }
  // 2. The optimizer updates my chunks only.
  update_owned();
  // 3. All-gather: every rank's updated chunk to every rank. (Copied out first: my chunk is a
  //    view into the very tensor the all-gather writes.)
  std::vector<Tensor> chunks;
  chunks.reserve(units.size());
  work.clear();
  for (size_t i = 0; i < units.size(); ++i) {
    const Tensor& params = units[i].params;
    chunks.push_back(Tensor::empty({owned[i].second - owned[i].first}, MemCategory::comm_buffers,
                                   params.dtype()));
    chunks.back().copy_from(params.flat_range(owned[i].first, owned[i].second));
    Tensor whole = params;
    work.push_back(dp.all_gather_async(chunks.back(), whole));
  }
  for (comm::Work& w : work) w.wait();
}

}  // namespace mgpu::reference

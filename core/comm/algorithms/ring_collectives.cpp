// reduce_scatter and all_gather with Comm's chunk convention, on top of the rings:
// every backend that runs its own algorithms (local, mpi, symmetric) calls these, so a
// reduce-scatter sums in the same order, allocates the same comm buffer and sends the same
// messages on threads, under mpirun and in the planner.
#include <fmt/format.h>

#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void check_my_chunk(const Comm& comm, const char* op, const char* side, int64_t got,
                    int64_t total) {
  const auto [begin, end] = chunk_range(total, comm.size(), comm.rank());
  if (got != end - begin)
    throw CommError(fmt::format(
        "{} on rank {} of group {}: {} has {} elements, expected chunk_range({}, {}, {}) = {}", op,
        comm.rank(), comm.name(), side, got, total, comm.size(), comm.rank(), end - begin));
}

void ring_reduce_scatter_into(Comm& comm, const Tensor& in, Tensor& out, ReduceOp op,
                              Allocator* allocator) {
  ring_reduce_scatter(comm, in, out, allocator);
  if (op == ReduceOp::avg) scale(out, 1.0f / comm.size());
}

void ring_all_gather_from(Comm& comm, const Tensor& in, Tensor& out) {
  const auto [begin, end] = chunk_range(out.numel(), comm.size(), comm.rank());
  Tensor mine = out.flat_range(begin, end);
  mine.copy_from(in);
  ring_all_gather(comm, out);
}

}  // namespace mgpu::comm::algorithms

// Under mpirun the collectives lesson also races its ring all-reduce (over the MPI backend's
// send/recv) against the MPI library's own MPI_Allreduce.
#include <chrono>
#include <ostream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/comm/comm.h"
#include "core/runtime/context.h"
#ifdef MGPU_HAVE_MPI
#include "core/comm/mpi/mpi_comm.h"
#endif
#include "core/trace/analysis.h"
#include "lessons/collectives_internal.h"
#include "lessons/training.h"

namespace mgpu::lessons {

using detail::format_size;

namespace {
// MPI_Allreduce on the world's processes (is_mpi() worlds only, so an MPI build).
void library_all_reduce(comm::Comm& comm, Tensor& t) {
#ifdef MGPU_HAVE_MPI
  comm::mpi::library_all_reduce(comm, t);
#else
  (void)t;
  throw std::logic_error("MPI_Allreduce needs an MPI build; backend is " + comm.backend());
#endif
}
}  // namespace

// Under mpirun: the ring all-reduce of this lesson (the world's, as --impl selected, over the MPI
// backend's send/recv) against MPI_Allreduce, on the same buffers, in the same run, wall clock.
void race_mpi_allreduce(World& world, const std::vector<int64_t>& counts, int iters,
                        std::ostream& out) {
  std::vector<std::pair<double, double>> seconds(counts.size());
  world.run([&](RankContext& ctx) {
    comm::Comm& comm = *ctx.comm;
    auto time_it = [&](auto&& op) {
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) op();
      comm.barrier();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
             iters;
    };
    for (size_t k = 0; k < counts.size(); ++k) {
      Tensor t = Tensor::zeros({counts[k]}, MemCategory::comm_buffers);
      double ring = time_it([&] { ctx.all_reduce(comm, t, comm::ReduceOp::sum); });
      double mpi = time_it([&] { library_all_reduce(comm, t); });
      seconds[k] = {ring, mpi};
    }
  });
  fmt::print(out,
             "ring all-reduce on MPI send/recv vs MPI_Allreduce ({} processes, wall clock, "
             "mean of {}):\n",
             world.size(), iters);
  fmt::print(out, "  {:>9} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "size", "ring time", "ring busbw",
             "MPI time", "MPI busbw", "ring speed");
  for (size_t k = 0; k < counts.size(); ++k) {
    int64_t bytes = counts[k] * 4;
    auto [ring, mpi] = seconds[k];
    auto ring_bw = trace::collective_bandwidth(bytes, ring, "all_reduce", world.size());
    auto mpi_bw = trace::collective_bandwidth(bytes, mpi, "all_reduce", world.size());
    fmt::print(out, "  {:>9} {:>12} {:>9.2f} GB/s {:>12} {:>9.2f} GB/s {:>11.2f}x\n",
               format_size(bytes), format_seconds(ring), ring_bw.busbw / 1e9, format_seconds(mpi),
               mpi_bw.busbw / 1e9, mpi / ring);
  }
}

}  // namespace mgpu::lessons

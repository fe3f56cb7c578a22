// All-reduce bus bandwidth: the local (threads) backend's ring on send/recv, and, when launched
// under mpirun in an MPI build, the MPI backend (MPI_Allreduce) on the same buffer sizes.
// busbw = 2(N-1)/N * bytes / time (nccl-tests' definition), on the wall clock.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/comm/comm.h"
#include "core/runtime/world.h"

using namespace mgpu;

namespace mgpu::reference {
void install_seams();
}

namespace {
bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
}

double busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::comm_buffers);
    ctx.comm->all_reduce(t);  // warm-up
    ctx.comm->barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) ctx.comm->all_reduce(t);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (ctx.rank == 0) seconds = s / iterations;
  });
  int N = world.size();
  return 2.0 * (N - 1) / N * n * 4 / seconds / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  mgpu::reference::install_seams();
  int ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  WorldOptions o;
  o.clock = ClockKind::wall;
  o.trace = false;
  o.backend = "local";
  o.ranks = ranks;
  if (under_mpirun()) o.backend = "mpi";
  World world(o);
  if (world.is_root())
    std::printf("%-10s %14s %14s\n", "elements", world.is_mpi() ? "mpi GB/s" : "local GB/s", "");
  for (int64_t n : {1 << 10, 1 << 16, 1 << 20, 1 << 22}) {
    double bw = busbw(world, n, n > (1 << 20) ? 5 : 20);
    if (world.is_root()) std::printf("%-10lld %14.3f\n", static_cast<long long>(n), bw);
  }
  if (world.is_root() && !world.is_mpi())
    std::printf(
        "(run under mpirun -n %d to measure MPI_Allreduce on the same sizes and compare "
        "the columns; the ratio local/mpi is the cost of the readable ring)\n",
        ranks);
  return 0;
}

// All-reduce bus bandwidth: the local (threads) backend's ring on send/recv, and, when launched
// under mpirun in an MPI build, Open MPI's own MPI_Allreduce (called directly, the reference)
// and the same ring over the MPI backend's send/recv, on the same buffer sizes, in one run.
// busbw = 2(N-1)/N * bytes / time (nccl-tests' definition), on the wall clock.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/seams.h"
#include "core/runtime/world.h"

#ifdef MGPU_HAVE_MPI
#include <mpi.h>
#endif

using namespace mgpu;

namespace mgpu::reference {
void install_seams();
}

namespace {
constexpr int kRounds = 3;

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
}

double busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::comm_buffers);
    ctx.comm->all_reduce(t);  // warm-up
    ctx.comm->barrier();
    double best = 1e300;
    for (int round = 0; round < kRounds; ++round) {  // best of a few rounds: the host is shared
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) ctx.comm->all_reduce(t);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (ctx.rank == 0) seconds = best / iterations;
  });
  int N = world.size();
  return 2.0 * (N - 1) / N * n * 4 / seconds / 1e9;
}
}  // namespace

// MPI_Allreduce itself, in place, across the processes of the world (MPI builds only).
double mpi_allreduce_busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
#ifdef MGPU_HAVE_MPI
  world.run([&](RankContext& ctx) {
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    auto once = [&] {
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    once();  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    double best = 1e300;
    for (int round = 0; round < kRounds; ++round) {  // best of a few rounds: the host is shared
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) once();
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (ctx.rank == 0) seconds = best / iterations;
  });
#else
  (void)world, (void)n, (void)iterations;
#endif
  int N = world.size();
  return seconds > 0 ? 2.0 * (N - 1) / N * n * 4 / seconds / 1e9 : 0;
}

// The ring all-reduce over the MPI backend's own send/recv (the seam), on the same world.
double ring_over_mpi_busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::comm_buffers);
    comm::comm_seams().all_reduce(*ctx.comm, t, comm::ReduceOp::sum);  // warm-up
    ctx.comm->barrier();
    double best = 1e300;
    for (int round = 0; round < kRounds; ++round) {  // best of a few rounds: the host is shared
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i)
        comm::comm_seams().all_reduce(*ctx.comm, t, comm::ReduceOp::sum);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (ctx.rank == 0) seconds = best / iterations;
  });
  int N = world.size();
  return 2.0 * (N - 1) / N * n * 4 / seconds / 1e9;
}

int main(int argc, char** argv) {
  mgpu::reference::install_seams();
  // bench_allreduce [RANKS [ELEMENTS...]]: 4 ranks and 1K, 64K, 1M, 4M elements by default.
  int ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  std::vector<int64_t> sizes = {1 << 10, 1 << 16, 1 << 20, 1 << 22};
  if (argc > 2) sizes.clear();
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  for (int64_t n : sizes)
    if (n <= 0 || ranks <= 0) {
      std::fprintf(stderr,
                   "bench_allreduce: ranks and element counts must be positive integers, e.g. "
                   "bench_allreduce 2 65536 1048576\n");
      return 2;
    }
  auto iterations = [](int64_t n) { return n > (1 << 20) ? 5 : 20; };
  WorldOptions o;
  o.clock = ClockKind::wall;
  o.trace = false;
  o.backend = "local";
  o.ranks = ranks;

  // Under mpirun: MPI_Allreduce and the ring over MPI send/recv, across the processes; then the
  // local backend (the same ring, ranks as threads) on the root with as many ranks, same sizes.
  std::vector<double> mpi_bw(sizes.size()), ring_mpi_bw(sizes.size());
  bool mpi = under_mpirun();
  bool root = true;
  if (mpi) {
    WorldOptions m = o;
    m.backend = "mpi";
    World world(m);
    ranks = world.size();
    root = world.is_root();
    for (size_t k = 0; k < sizes.size(); ++k) {
      mpi_bw[k] = mpi_allreduce_busbw(world, sizes[k], iterations(sizes[k]));
      ring_mpi_bw[k] = ring_over_mpi_busbw(world, sizes[k], iterations(sizes[k]));
    }
  }
  if (!root) return 0;
  o.ranks = ranks;
  World local(o);
  std::printf("all-reduce busbw, %d ranks, wall clock (GB/s; busbw = 2(N-1)/N x bytes / time)\n",
              ranks);
  std::printf("%-10s %12s", "elements", "local ring");
  if (mpi) std::printf(" %14s %14s %12s", "ring over MPI", "MPI_Allreduce", "local / MPI");
  std::printf("\n");
  for (size_t k = 0; k < sizes.size(); ++k) {
    double bw = busbw(local, sizes[k], iterations(sizes[k]));
    std::printf("%-10lld %12.3f", static_cast<long long>(sizes[k]), bw);
    if (mpi) std::printf(" %14.3f %14.3f %11.2fx", ring_mpi_bw[k], mpi_bw[k], bw / mpi_bw[k]);
    std::printf("\n");
  }
  if (!mpi)
    std::printf(
        "(run under mpirun -n %d to race MPI_Allreduce on the same sizes in the same run)\n",
        ranks);
  return 0;
}

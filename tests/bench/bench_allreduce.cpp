// All-reduce bus bandwidth: the local (threads) backend's all_reduce (the ring on send/recv and
// recv_reduce), the same ring with recv into a temporary + add instead of recv_reduce (called
// directly, so without the collective's checks: if anything, favoured), and, when launched under
// mpirun in an MPI build, Open MPI's own MPI_Allreduce (called directly, the reference) and the
// ring over the MPI backend's send/recv, on the same buffer sizes, in one run.
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
// Best of this many timed rounds, the same for every contender: on a shared 2-core host a round
// that lost the core to another process says nothing about the all-reduce.
constexpr int kRounds = 10;

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
}

double busbw(int ranks, int64_t n, double seconds) {
  return seconds > 0 ? 2.0 * (ranks - 1) / ranks * n * 4 / seconds / 1e9 : 0;
}

// Seconds per call: one warm-up call, a barrier, then the best of kRounds timed rounds.
template <class Once, class Barrier>
double best_seconds(int iterations, Once&& once, Barrier&& barrier) {
  once();
  barrier();
  double best = 1e300;
  for (int round = 0; round < kRounds; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) once();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best / iterations;
}

// A comm whose recv_reduce is Comm's default, recv into a temporary + add: the ring as written
// before recv_reduce (and as an exercise-01 answer on send/recv still runs), for the before/after.
class RecvThenAdd final : public comm::Comm {
 public:
  explicit RecvThenAdd(comm::Comm& inner) : c_(inner) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  int world_rank(int r) const override { return c_.world_rank(r); }
  std::string name() const override { return c_.name(); }
  std::string backend() const override { return c_.backend(); }
  void send(const Tensor& t, int dst, int tag) override { c_.send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { c_.recv(t, src, tag); }
  comm::Work isend(const Tensor& t, int dst, int tag) override { return c_.isend(t, dst, tag); }
  comm::Work irecv(Tensor& t, int src, int tag) override { return c_.irecv(t, src, tag); }
  void all_reduce(Tensor& t, comm::ReduceOp op) override { c_.all_reduce(t, op); }
  comm::Work all_reduce_async(Tensor& t, comm::ReduceOp op) override {
    return c_.all_reduce_async(t, op);
  }
  void reduce_scatter(const Tensor& in, Tensor& out, comm::ReduceOp op) override {
    c_.reduce_scatter(in, out, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override { c_.all_gather(in, out); }
  void all_to_all(const Tensor& in, Tensor& out) override { c_.all_to_all(in, out); }
  comm::Work reduce_scatter_async(const Tensor& in, Tensor& out, comm::ReduceOp op) override {
    return c_.reduce_scatter_async(in, out, op);
  }
  comm::Work all_gather_async(const Tensor& in, Tensor& out) override {
    return c_.all_gather_async(in, out);
  }
  void broadcast(Tensor& t, int root) override { c_.broadcast(t, root); }
  void barrier() override { c_.barrier(); }
  std::unique_ptr<comm::Comm> split(int color, int key, const std::string& name) override {
    return c_.split(color, key, name);
  }

 private:
  comm::Comm& c_;
};

// Comm::all_reduce of the world's backend: on local, the ring on threads.
double all_reduce_busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::comm_buffers);
    double s = best_seconds(
        iterations, [&] { ctx.comm->all_reduce(t); }, [&] { ctx.comm->barrier(); });
    if (ctx.rank == 0) seconds = s;
  });
  return busbw(world.size(), n, seconds);
}

// The ring all-reduce (the seam) called directly on the backend's send/recv, with recv_reduce or,
// when `recv_then_add`, with recv into a temporary + add.
double ring_busbw(World& world, int64_t n, int iterations, bool recv_then_add) {
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({n}, MemCategory::comm_buffers);
    RecvThenAdd unfused(*ctx.comm);
    comm::Comm& comm = recv_then_add ? unfused : *ctx.comm;
    double s = best_seconds(
        iterations, [&] { comm::comm_seams().all_reduce(comm, t, comm::ReduceOp::sum); },
        [&] { ctx.comm->barrier(); });
    if (ctx.rank == 0) seconds = s;
  });
  return busbw(world.size(), n, seconds);
}
}  // namespace

// MPI_Allreduce itself, in place, across the processes of the world (MPI builds only).
double mpi_allreduce_busbw(World& world, int64_t n, int iterations) {
  double seconds = 0;
#ifdef MGPU_HAVE_MPI
  world.run([&](RankContext& ctx) {
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    double s = best_seconds(
        iterations,
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        },
        [] { MPI_Barrier(MPI_COMM_WORLD); });
    if (ctx.rank == 0) seconds = s;
  });
#else
  (void)world, (void)n, (void)iterations;
#endif
  return busbw(world.size(), n, seconds);
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
      ring_mpi_bw[k] = ring_busbw(world, sizes[k], iterations(sizes[k]), false);
    }
  }
  if (!root) return 0;
  o.ranks = ranks;
  World local(o);
  std::printf("all-reduce busbw, %d ranks, wall clock (GB/s; busbw = 2(N-1)/N x bytes / time)\n",
              ranks);
  std::printf("%-10s %12s %12s", "elements", "local ring", "recv + add");
  if (mpi) std::printf(" %14s %14s %12s", "ring over MPI", "MPI_Allreduce", "local / MPI");
  std::printf("\n");
  for (size_t k = 0; k < sizes.size(); ++k) {
    double bw = all_reduce_busbw(local, sizes[k], iterations(sizes[k]));
    double unfused = ring_busbw(local, sizes[k], iterations(sizes[k]), true);
    std::printf("%-10lld %12.3f %12.3f", static_cast<long long>(sizes[k]), bw, unfused);
    if (mpi) std::printf(" %14.3f %14.3f %11.2fx", ring_mpi_bw[k], mpi_bw[k], bw / mpi_bw[k]);
    std::printf("\n");
  }
  if (!mpi)
    std::printf(
        "(run under mpirun -n %d to race MPI_Allreduce on the same sizes in the same run)\n",
        ranks);
  return 0;
}

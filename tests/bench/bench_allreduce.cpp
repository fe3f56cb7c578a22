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
#include <memory>
#include <thread>
#include <vector>

#include "core/comm/comm.h"
#include "core/world/world.h"
#include "exercises/exercises.h"  // the reference ring all-reduce

#ifdef MGPU_HAVE_MPI
#include <mpi.h>
#endif
#ifdef __linux__
#include <sched.h>
#include <unistd.h>
#endif

using namespace mgpu;

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
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) override {
    c_.all_to_all_v(in, send_counts, out, recv_counts);
  }
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
        iterations, [&] { ctx.all_reduce(comm, t, comm::ReduceOp::sum); },
        [&] { ctx.comm->barrier(); });
    if (ctx.rank == 0) seconds = s;
  });
  return busbw(world.size(), n, seconds);
}
}  // namespace

// mpirun binds each process of a small job to one core (Open MPI: --bind-to core for 2 ranks),
// and threads inherit their creator's binding: the local world would run every rank on the root's
// one core. While it lives, the calling thread may run on every core, as without mpirun.
class OnEveryCore {
 public:
  OnEveryCore() {
#ifdef __linux__
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t all;
    CPU_ZERO(&all);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < cores && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &all);
    sched_setaffinity(0, sizeof(all), &all);
#endif
  }
  ~OnEveryCore() {
#ifdef __linux__
    sched_setaffinity(0, sizeof(saved_), &saved_);  // back to Open MPI's binding for its turn
#endif
  }
  OnEveryCore(const OnEveryCore&) = delete;
  OnEveryCore& operator=(const OnEveryCore&) = delete;

 private:
#ifdef __linux__
  cpu_set_t saved_{};
#endif
};

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

// The root's local world runs while the other processes wait here. MPI_Barrier would busy-poll
// and take cores from the threads being timed, so they poll a non-blocking barrier every
// millisecond instead (a back-off: the barrier, not the sleep, is the synchronisation).
void mpi_quiet_barrier() {
#ifdef MGPU_HAVE_MPI
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char** argv) {
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
  o.all_reduce = &reference::ring_all_reduce;

  // Under mpirun: the processes race MPI_Allreduce and the ring over MPI send/recv, then the root
  // races the local backend (the same ring, ranks as threads, as many as there are processes)
  // while the others wait quietly; kRaces times per size, interleaved, so that a change in the
  // host's load or in where its cores run hits both contenders alike. Each column is the median
  // over the races; local / MPI is the median of the per-race ratios, beside the worst race's.
  constexpr int kRaces = 5;
  const bool mpi = under_mpirun();
  std::unique_ptr<World> mpi_world;
  if (mpi) {
    WorldOptions m = o;
    m.backend = "mpi";
    mpi_world = std::make_unique<World>(m);
    ranks = mpi_world->size();
  }
  const bool root = !mpi_world || mpi_world->is_root();
  std::unique_ptr<World> local;
  if (root) {
    o.ranks = ranks;
    local = std::make_unique<World>(o);
    std::printf(
        "all-reduce busbw, %d ranks, wall clock (GB/s; busbw = 2(N-1)/N x bytes / time)%s\n", ranks,
        mpi ? "; median of 5 interleaved races" : "");
    std::printf("%-10s %12s %12s", "elements", "local ring", "recv + add");
    if (mpi)
      std::printf(" %14s %14s %12s %12s", "ring over MPI", "MPI_Allreduce", "local / MPI",
                  "worst race");
    std::printf("\n");
  }
  for (int64_t n : sizes) {
    std::vector<double> fused, unfused, ring_mpi, library, ratio;
    for (int race = 0; race < (mpi ? kRaces : 1); ++race) {
      if (mpi_world) {
        library.push_back(mpi_allreduce_busbw(*mpi_world, n, iterations(n)));
        ring_mpi.push_back(ring_busbw(*mpi_world, n, iterations(n), false));
      }
      if (root) {
        OnEveryCore unbound;
        fused.push_back(all_reduce_busbw(*local, n, iterations(n)));
        unfused.push_back(ring_busbw(*local, n, iterations(n), true));
        if (mpi) ratio.push_back(fused.back() / library.back());
      }
      if (mpi) mpi_quiet_barrier();
    }
    if (!root) continue;
    std::printf("%-10lld %12.3f %12.3f", static_cast<long long>(n), median(fused), median(unfused));
    if (mpi)
      std::printf(" %14.3f %14.3f %11.2fx %11.2fx", median(ring_mpi), median(library),
                  median(ratio), *std::min_element(ratio.begin(), ratio.end()));
    std::printf("\n");
    std::fflush(stdout);
  }
  if (root && !mpi)
    std::printf(
        "(run under mpirun -n %d to race MPI_Allreduce on the same sizes in the same run)\n",
        ranks);
  return 0;
}

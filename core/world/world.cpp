// World: starts one thread per rank (or, under mpirun, is one rank of a process world), installs
// each rank's context, runs the user's function everywhere and turns the first failure into a
// RankError after every rank has stopped (no orphan threads, no hang).
#include "core/world/world.h"

#include "core/runtime/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/comm/local/local_world.h"
#include "core/ops/cpu/kernels.h"
#include "core/ops/cuda_emulation.h"
#include "core/ops/cuda_module.h"
#include "core/runtime/gpu.h"
#ifdef MGPU_HAVE_NCCL
#include "core/comm/nccl/nccl_comm.h"
#endif
#ifdef MGPU_HAVE_MPI
#include "core/comm/mpi/mpi_comm.h"
#endif

namespace mgpu {

namespace {

// Threads joined when they go out of scope (std::jthread's join; libc++ 14 has no jthread).
struct JoinedThreads : std::vector<std::thread> {
  ~JoinedThreads() {
    for (std::thread& t : *this)
      if (t.joinable()) t.join();
  }
};

// mpirun / srun set these in every process they start.
bool launched_by_mpi_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

// `gpus`: how many CUDA devices there are (cuda only). Rank r uses GPU r % gpus, so with more
// ranks than GPUs several ranks share one ("shared-GPU mode").
Device device_for_rank(DeviceKind kind, int rank, int gpus) {
  switch (kind) {
    case DeviceKind::cpu:
      return Device::cpu(rank);
    case DeviceKind::phantom:
      return Device::phantom(rank);
    case DeviceKind::cuda:
      return Device::cuda(gpus > 0 ? rank % gpus : rank);
  }
  return Device::cpu(rank);
}

#ifdef MGPU_HAVE_MPI
// Compares this process's run configuration with every other's (see WorldOptions::run_config);
// throws RunConfigMismatch, on every process, when any differs.
void agree_on_run_config(const RunConfig& mine, int my_rank, double timeout) {
  const std::vector<std::string> all =
      comm::mpi::world_strings_if_different(nlohmann::json(mine).dump(), timeout);
  if (all.empty()) return;
  std::vector<RunConfig> per_rank;
  for (const std::string& text : all) per_rank.push_back(nlohmann::json::parse(text));
  throw RunConfigMismatch(describe_run_config_disagreement(per_rank), my_rank == 0);
}
#endif

// The all-reduce of a world made without one (WorldOptions::all_reduce empty): core holds no
// ring all-reduce of its own (it is exercise 01), so asking for one is a mistake of the caller.
void no_all_reduce(comm::Comm& comm, Tensor&, comm::ReduceOp) {
  throw std::logic_error(fmt::format(
      "all_reduce on group '{}': this World was made without an all-reduce; set "
      "WorldOptions::all_reduce to exercise 01's function (the --impl selection's, e.g. "
      "ex::selected_seams().comm.all_reduce)",
      comm.name()));
}

}  // namespace

struct World::Impl {
  WorldOptions options;
  bool mpi = false;
  int world_size = 1;
  int first_rank = 0;     // world rank of ranks[0] (non-zero under MPI)
  int gpus = 0;           // CUDA devices visible (device cuda only)
  bool emulated = false;  // cuda emulated on the CPU (cuda_emulation.h): its memory is the host's
  std::vector<std::unique_ptr<RankContext>> ranks;
  std::shared_ptr<comm::local::LocalWorld> local;
  std::vector<std::unique_ptr<comm::Comm>> comms;

  std::unique_ptr<RankContext> make_rank(int r, RankClock::Epoch epoch) const {
    HardwareProfile profile = options.profile;
    if (options.capacity_override >= 0) profile.memory_capacity = options.capacity_override;
    if (options.device == DeviceKind::cpu || emulated)  // host memory: never more than it has
      profile.memory_capacity =
          cpu_rank_capacity(profile.memory_capacity, mpi ? processes_on_this_host() : world_size,
                            host_available_bytes());
    auto ctx = std::make_unique<RankContext>(
        r, world_size, device_for_rank(options.device, r, gpus), profile, options.clock, epoch);
    ctx->profile = options.profile;  // the allocator keeps the overridden capacity
    ctx->tracer.enabled = options.trace;
    ctx->all_reduce = options.all_reduce;
    return ctx;
  }
};

World::World(WorldOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  cpu::use_one_blas_thread();  // before any rank starts: OpenBLAS's idle pool would spin
  w.options = std::move(options);
  if (!w.options.all_reduce) w.options.all_reduce = no_all_reduce;
  const std::string backend = choose_backend(w.options.backend);
  const auto epoch = std::chrono::steady_clock::now();
  if (backend == "mpi") {
    make_mpi_world(epoch);
  } else if (backend == "nccl") {
    if (w.options.device != DeviceKind::cuda)
      throw std::invalid_argument("backend nccl needs --device cuda (use local or mpi on cpu)");
    make_nccl_world(epoch);
  } else if (backend == "local") {
    make_thread_world(epoch);
  } else {
    throw std::invalid_argument(fmt::format(
        "backend '{}' is not available for a thread world; use auto, local or mpi", backend));
  }
}

std::string World::choose_backend(const std::string& requested) {
  Impl& w = *impl_;
  std::string backend = requested;
  if (backend == "auto") backend = launched_by_mpi_launcher() ? "mpi" : "local";
  if (w.options.device == DeviceKind::cuda && cuda::emulation_requested())
    return choose_emulated_backend(backend);
  // CUDA: install the kernels and the caching allocator, and find out how many GPUs there are.
  // One GPU per rank -> NCCL; more ranks than GPUs -> shared-GPU mode on the local backend.
  if (w.options.device == DeviceKind::cuda && backend != "mpi") {
    if (!cuda::install())
      throw std::invalid_argument(
          cuda::built_with_cuda()
              ? "--device cuda: no CUDA GPU found (cudaGetDeviceCount reports none); use --device "
                "cpu"
              : "--device cuda: this build has no CUDA support (rebuild with the CUDA toolkit); "
                "use --device cpu");
    w.gpus = cuda::device_count();
    const bool fits = w.options.ranks <= w.gpus;
#ifdef MGPU_HAVE_NCCL
    const bool have_nccl = true;
#else
    const bool have_nccl = false;
#endif
    if (backend == "nccl" && !fits)
      throw std::invalid_argument(fmt::format(
          "backend nccl needs one GPU per rank: {} ranks but {} GPU(s); use --ranks {} or "
          "--backend local (shared-GPU mode)",
          w.options.ranks, w.gpus, w.gpus));
    if (backend == "nccl" && !have_nccl)
      throw std::invalid_argument("backend nccl: this build has no NCCL; use --backend local");
    if (backend == "auto") backend = fits && have_nccl ? "nccl" : "local";
    if (backend == "nccl")
      fmt::print("cuda: {} rank(s) on {} GPU(s), one GPU per rank, nccl backend\n", w.options.ranks,
                 w.gpus);
    else
      fmt::print("cuda: {} rank(s) on {} GPU(s), {}local backend{}\n", w.options.ranks, w.gpus,
                 fits ? "" : "SHARED-GPU MODE, ",
                 fits ? "" : " (ranks share GPUs: timings are not those of separate GPUs)");
  }
  if (backend == "mpi" && w.options.device == DeviceKind::cuda)
    throw std::invalid_argument(
        "--device cuda under mpirun is not supported yet (the mpi backend moves host tensors); "
        "run without mpirun: one process, one thread per GPU, nccl backend");
  return backend;
}

// MGPU_CUDA_EMULATION=1 (cuda_emulation.h): cuda on the CPU, whatever GPUs there are. Each rank
// is a thread with its own emulated GPU, on the local backend.
std::string World::choose_emulated_backend(const std::string& backend) {
  Impl& w = *impl_;
  const auto refuse = [](const char* what, const char* instead) {
    throw std::invalid_argument(fmt::format("{} under {}=1 (cuda emulated on the CPU): {}", what,
                                            cuda::kEmulationEnv, instead));
  };
  if (backend == "mpi")
    refuse("backend mpi", "emulated ranks are threads of one process: run without mpirun");
  if (backend == "nccl")
    refuse("backend nccl", "NCCL needs real GPUs: use the local backend (auto picks it)");
  if (w.options.clock == ClockKind::cuda)
    refuse("--clock cuda", "CUDA events time real GPUs; use --clock modeled or wall");
  cuda::install_emulation();
  w.gpus = w.options.ranks;
  w.emulated = true;
  fmt::print("cuda: EMULATED on the CPU ({}=1): {} rank(s), one emulated GPU each, local backend\n",
             cuda::kEmulationEnv, w.options.ranks);
  return "local";
}

void World::make_mpi_world(RankClock::Epoch epoch) {
  Impl& w = *impl_;
#ifdef MGPU_HAVE_MPI
  auto process = comm::mpi::init_process();
  w.mpi = true;
  w.world_size = process.size;
  w.first_rank = process.rank;
  w.options.ranks = process.size;
  w.ranks.push_back(w.make_rank(process.rank, epoch));
  w.comms.push_back(
      comm::mpi::make_world_comm(*w.ranks[0], w.options.comm_timeout, w.options.all_reduce));
  w.ranks[0]->comm = w.comms[0].get();
  agree_on_run_config(w.options.run_config, process.rank, w.options.comm_timeout);
#else
  (void)w;
  (void)epoch;
  throw std::invalid_argument(
      "backend 'mpi' requested but this build has no MPI "
      "(install libopenmpi-dev openmpi-bin and reconfigure)");
#endif
}

void World::make_thread_world(RankClock::Epoch epoch) {
  Impl& w = *impl_;
  if (w.options.ranks < 1 || w.options.ranks > 64)
    throw std::invalid_argument(
        fmt::format("a thread world has 1 to 64 ranks, not {}", w.options.ranks));
  w.world_size = w.options.ranks;
  std::vector<RankContext*> contexts;
  for (int r = 0; r < w.world_size; ++r) {
    w.ranks.push_back(w.make_rank(r, epoch));
    contexts.push_back(w.ranks.back().get());
  }
  w.local = std::make_shared<comm::local::LocalWorld>(w.world_size, w.options.comm_timeout,
                                                      comm::local::ranks_share_cores(w.world_size));
  w.comms = comm::local::make_local_world_comms(w.local, contexts, w.options.all_reduce);
  for (int r = 0; r < w.world_size; ++r) w.ranks[r]->comm = w.comms[r].get();
}

// One thread per rank calls ncclCommInitRank with a shared id (the call blocks until all ranks
// have joined, so they must run concurrently).
void World::make_nccl_world(RankClock::Epoch epoch) {
  Impl& w = *impl_;
#ifdef MGPU_HAVE_NCCL
  w.world_size = w.options.ranks;
  for (int r = 0; r < w.world_size; ++r) w.ranks.push_back(w.make_rank(r, epoch));
  const comm::nccl::UniqueId id = comm::nccl::make_unique_id();
  w.comms.resize(w.world_size);
  std::vector<std::exception_ptr> errors(w.world_size);
  {
    JoinedThreads threads;
    for (int r = 0; r < w.world_size; ++r)
      threads.emplace_back([&, r] {
        try {
          ScopedRank scoped(*w.ranks[r]);
          w.comms[r] =
              comm::nccl::make_comm(*w.ranks[r], id, r, w.world_size, w.options.comm_timeout);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < w.world_size; ++r) w.ranks[r]->comm = w.comms[r].get();
#else
  (void)w;
  (void)epoch;
  throw std::invalid_argument("backend nccl: this build has no NCCL; use --backend local");
#endif
}

World::~World() = default;

int World::size() const {
  return impl_->world_size;
}
const WorldOptions& World::options() const {
  return impl_->options;
}
bool World::is_mpi() const {
  return impl_->mpi;
}
bool World::is_root() const {
  return impl_->first_rank == 0;
}

RankContext& World::rank(int r) {
  int local = r - impl_->first_rank;
  if (local < 0 || local >= static_cast<int>(impl_->ranks.size()))
    throw std::out_of_range(fmt::format("rank {} is not held by this process", r));
  return *impl_->ranks[local];
}

std::vector<int> World::local_ranks() const {
  std::vector<int> held;
  for (auto& ctx : impl_->ranks) held.push_back(ctx->rank);
  return held;
}

void World::run(const std::function<void(RankContext&)>& fn) {
  Impl& w = *impl_;
  if (w.mpi) {  // this process is one rank
    RankContext& ctx = *w.ranks[0];
    ScopedRank scoped(ctx);
    try {
      fn(ctx);
    } catch (const std::exception& e) {
#ifdef MGPU_HAVE_MPI
      comm::mpi::note_failure(e.what());
#endif
      throw RankError(ctx.rank, e.what(), std::current_exception());
    }
    return;
  }

  // A real failure wins over "aborted because rank K failed" errors (its echoes). Among real
  // failures the lowest rank's is reported, so the message does not depend on thread timing.
  std::mutex failure_mutex;
  std::optional<RankError> failure;
  std::optional<RankError> echo;
  auto record = [&](int rank, const std::string& what, bool is_echo) {
    std::lock_guard lock(failure_mutex);
    auto& slot = is_echo ? echo : failure;
    if (!slot || rank < slot->rank()) slot.emplace(rank, what, std::current_exception());
  };

  if (w.local) w.local->begin_run();
  auto body = [&](int r) {
    RankContext& ctx = *w.ranks[r];
    ScopedRank scoped(ctx);
    try {
      fn(ctx);
      if (w.local) w.local->rank_finished(r);
      return;
    } catch (const comm::Aborted& e) {
      record(r, e.what(), true);
    } catch (const std::exception& e) {
      record(r, e.what(), false);
    } catch (...) {
      record(r, "unknown exception", false);
    }
    if (w.local) w.local->rank_failed(r);  // wakes every rank blocked in a wait (nccl: timeouts)
  };

  if (w.world_size == 1) {
    body(0);
  } else {
    JoinedThreads threads;
    threads.reserve(w.world_size);
    for (int r = 0; r < w.world_size; ++r) threads.emplace_back(body, r);
  }  // the threads join here
  if (failure) throw *failure;
  if (echo) throw *echo;
}

trace::Trace World::collect_trace(nlohmann::json metadata) const {
  const Impl& w = *impl_;
  trace::Trace out;
  out.num_ranks = w.world_size;
  metadata["num_ranks"] = w.world_size;
  metadata["clock"] = clock_name(w.options.clock);
  metadata["profile"] = w.options.profile.to_json();
  if (!w.options.profile.faults.empty()) metadata["faults"] = w.options.profile.faults.to_json();
  out.metadata = std::move(metadata);

  auto sorted = [](std::vector<trace::Event> events) {
    std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
      return std::tie(a.rank, a.start) < std::tie(b.rank, b.start);
    });
    return events;
  };
#ifdef MGPU_HAVE_MPI
  if (w.mpi) {
    trace::Trace mine;
    mine.events = w.ranks[0]->tracer.events();
    mine.counters = w.ranks[0]->tracer.counters();
    comm::mpi::gather_trace_to_root(mine, out);
    out.events = sorted(std::move(out.events));
    return out;
  }
#endif
  for (const auto& ctx : w.ranks) {
    const auto& events = ctx->tracer.events();
    out.events.insert(out.events.end(), events.begin(), events.end());
    const auto& counters = ctx->tracer.counters();
    out.counters.insert(out.counters.end(), counters.begin(), counters.end());
  }
  out.events = sorted(std::move(out.events));
  return out;
}

}  // namespace mgpu

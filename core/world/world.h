// World: N ranks, each with its device, allocator, clock, tracer and communicator. By default
// the ranks are threads of this process (N up to 64); under mpirun each process is one rank.
// World::run executes a function on every rank; if any rank throws, every rank is stopped
// promptly and the first error is rethrown with its rank id.
#pragma once
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/context.h"
#include "core/runtime/trace_event.h"

namespace mgpu {

// A run's resolved options, (option, value) in a fixed order: what every process of an MPI job
// must agree on before the first step.
using RunConfig = std::vector<std::pair<std::string, std::string>>;

struct WorldOptions {
  int ranks = 1;
  DeviceKind device = DeviceKind::cpu;
  ClockKind clock = ClockKind::modeled;
  HardwareProfile profile = HardwareProfile::load("8xH100-NVLink");
  std::string backend = "auto";  // auto | local | mpi | nccl
  double comm_timeout = 30.0;    // seconds before a stuck wait is reported
  bool trace = true;
  int64_t capacity_override = -1;  // bytes per rank; -1 = the profile's capacity
  // Under mpirun every process compares its run configuration with the others' as the World is
  // made (a hash, one small all-reduce): processes started with different options (an MPMD
  // command line, a typo in one) would otherwise exchange messages of different sizes or train
  // different models in silence. Threads share one configuration, so nothing is compared.
  RunConfig run_config;
  // The ring all-reduce every communicator of the world runs (exercise 01's function, from the
  // program's --impl selection). Empty: every all_reduce on this world's communicators throws
  // std::logic_error saying so (a world that never all-reduces needs none).
  comm::AllReduceFn all_reduce;
};

// Processes of one MPI job started with different run configurations: what() is the table of
// which rank differs in which option, the same on every process; reported() is true only on
// world rank 0, the one process that prints it.
class RunConfigMismatch : public std::invalid_argument {
 public:
  RunConfigMismatch(const std::string& table, bool reported)
      : std::invalid_argument(table), reported_(reported) {}
  bool reported() const { return reported_; }

 private:
  bool reported_;
};

// The table RunConfigMismatch carries, from every rank's configuration (by world rank): the
// options on which some rank differs from rank 0, as rows; rank 0 and the ranks that differ, as
// columns.
std::string describe_run_config_disagreement(const std::vector<RunConfig>& per_rank);

// An exception raised on one rank, re-thrown by World::run on the calling thread. cause() is
// the original exception, so callers can still tell e.g. an OutOfMemory from a bug.
class RankError : public std::runtime_error {
 public:
  RankError(int rank, const std::string& what, std::exception_ptr cause = nullptr)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + what),
        rank_(rank),
        cause_(std::move(cause)) {}
  int rank() const { return rank_; }
  const std::exception_ptr& cause() const { return cause_; }

 private:
  int rank_;
  std::exception_ptr cause_;
};

class World {
 public:
  explicit World(WorldOptions options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const;
  const WorldOptions& options() const;
  bool is_mpi() const;   // ranks are processes (this process holds one of them)
  bool is_root() const;  // the process that prints (always true for threads)

  // Runs fn(ctx) on every rank with ctx installed as current_rank(). May be called repeatedly;
  // clocks keep running across calls.
  void run(const std::function<void(RankContext&)>& fn);

  // The rank contexts this process holds (all of them for threads, one under MPI).
  RankContext& rank(int r);
  std::vector<int> local_ranks() const;

  // All ranks' events and memory counters merged (gathered to the root under MPI), ordered by
  // (rank, start); metadata gets num_ranks, clock and profile filled in.
  trace::Trace collect_trace(nlohmann::json metadata = nlohmann::json::object()) const;

 private:
  // The backend `backend` resolves to ("auto": mpi under mpirun, else local, or nccl with one
  // GPU per rank); installs CUDA when the device is cuda.
  std::string choose_backend(const std::string& backend);
  std::string choose_emulated_backend(const std::string& backend);  // MGPU_CUDA_EMULATION=1
  void make_mpi_world(RankClock::Epoch epoch);     // backend mpi: this process is one rank
  void make_thread_world(RankClock::Epoch epoch);  // backend local: one thread per rank
  void make_nccl_world(RankClock::Epoch epoch);    // backend nccl: one GPU per rank
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgpu

// A run as one typed value. RunSpec says everything a training run is: the model, the world
// (ranks, device, clock, profile), the task, the trainer's options (steps, batch, checkpoint,
// resume), the optimizer and the parallelism: which part of the mesh engine over which axis, or
// the hybrid engine's mesh. validate(spec) holds every rule of what combines with what in one
// table (validate.cpp); run(spec) builds each rank's layout from the spec, trains, and returns
// typed results: the losses, every rank's report (core/train/rank_report.h) and the trace.
//
// The lessons turn their options into a spec in one place and narrate what comes back; adding a
// paradigm adds an alternative to Parallelism, its rules and its factory here.
#pragma once
#include <memory>
#include <optional>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/data/task.h"
#include "core/model/config.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/ddp.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero.h"
#include "core/runtime/trace_event.h"
#include "core/train/trainer.h"
#include "core/world/world.h"

namespace mgpu::run {

// ---- the parallelism: one alternative per way a run is cut ----------------------------------

struct SingleDevice {};  // one rank holds everything (the mesh engine, no axis above 1)
// The naive single-driver data parallel (the lessons' contrast): rank 0 scatters, gathers, steps.
struct NaiveDataParallel {};
// DDP over every rank: buckets, overlap, gradient accumulation.
struct DataParallel {
  parallel::DdpOptions options;
  int accum = 1;  // micro-steps per optimizer step
  // The ddp lesson's planted bug: every rank trains on shard 0 instead of its own.
  bool same_shard = false;
  parallel::DdpSeams seams;
};
// ZeRO 1-3 over every rank (stage 0: plain replicas through the same flat units).
struct Zero {
  parallel::ZeroOptions options;
  parallel::ZeroSeams seams;
};
// Megatron's tensor parallelism over every rank; with sequence_parallel its SP regions.
struct TensorParallel {
  bool sequence_parallel = false;
  parallel::TpSeams seams;
};
// The sequence cut over every rank: ring attention (contiguous, zigzag), Ulysses, naive chunks.
struct ContextParallel {
  parallel::CpLayout layout = parallel::CpLayout::zigzag;
  parallel::CpSeams seams;
};
// Experts over ep ranks of the data-parallel world (dp = every rank).
struct ExpertParallel {
  int ep = 1;
};
// The hybrid engine: tp x cp x dp x pp (and ep) with a pipeline schedule. `pipeline`: the
// pipeline lesson's mesh, pp over the whole world (options.mesh set from it).
struct Hybrid {
  parallel::HybridOptions options;
  parallel::HybridSeams seams;
  bool pipeline = false;
};

using Parallelism = std::variant<SingleDevice, NaiveDataParallel, DataParallel, Zero,
                                 TensorParallel, ContextParallel, ExpertParallel, Hybrid>;

struct RunSpec {
  GPTConfig model;
  WorldOptions world;
  std::shared_ptr<const data::Task> task;
  train::TrainOptions train;
  train::OptimizerFactory optimizer;
  Parallelism parallelism = SingleDevice{};
  // The trace's metadata ({"lesson": ..., "config": ..., "predictions": ...}); without it no
  // trace is collected.
  std::optional<nlohmann::json> trace_meta;
};

struct RunResult {
  train::TrainResult trained;  // losses, every rank's report (report_ranks), parameters
  trace::Trace trace;          // the merged trace (on the root process), with trace_meta
  bool root = true;            // this process holds the results (under mpirun: rank 0's)
  bool mpi = false;            // the ranks were processes
  int ranks = 1;               // the world's size
};

// Throws std::invalid_argument with one line (what is wrong, what would work) unless the spec
// can run: the first rule of the table (validate.cpp) that it breaks.
void validate(const RunSpec& spec);

// Throws std::invalid_argument (one line naming the batches that work) unless the global batch
// splits into ranks x accum equal shares: data parallelism's rule, which the lessons check as they
// size the batch and validate checks for every data-parallel spec.
void check_replica_shares(int global_batch, int ranks, int accum = 1);

// Validates, builds a World from spec.world, trains on every rank, collects the trace.
// `on_loss`: each step's loss on the root as soon as it is known (progress printing).
RunResult run(const RunSpec& spec, const train::LossCallback& on_loss = {});

// This rank's layout for the spec (the factory run() hands the trainer), built over the rank's
// world comm, or over `world` (the planner's representative ranks stand in a smaller world).
std::unique_ptr<train::Layout> make_layout(const RunSpec& spec, RankContext& ctx);
std::unique_ptr<train::Layout> make_layout(const RunSpec& spec, comm::Comm& world);

}  // namespace mgpu::run

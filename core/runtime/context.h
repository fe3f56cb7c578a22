// The per-rank context: who I am (rank, world size), where my tensors live (device, allocator),
// how time passes (profile, clock) and what I record (tracer). Each rank thread installs its
// context; kernels and scopes find it through current_rank(). Code that never installs one (unit
// tests, single-device tools) gets a default single-rank CPU context with a modeled clock.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime/all_reduce_fn.h"
#include "core/runtime/allocator.h"
#include "core/runtime/clock.h"
#include "core/runtime/profile.h"
#include "core/runtime/trace_event.h"

namespace mgpu {

namespace comm {
class Comm;
}

// Records one rank's events and memory counters.
class Tracer {
 public:
  explicit Tracer(int rank = 0) : rank_(rank) {}
  bool enabled = true;
  bool record_kernels = false;  // also record every kernel that runs inside a scope
  // While set (CommLabelScope), every comm-lane event recorded takes this label's name, and its
  // layer and counts where given: an expert exchange names its all-to-alls "dispatch" and
  // "combine" on the timeline. The collective's own kind stays in the event's `op`.
  struct CommLabel {
    std::string name;
    int layer = -1;
    std::vector<int64_t> counts;
  };
  std::optional<CommLabel> comm_label;
  // Set: every event streams here (labelled) instead of into events(), and memory counters are not
  // kept: a consumer that needs a summary, not the trace (the planner), holds no trace at all.
  std::function<void(const trace::Event&)> sink;

  void record(trace::Event e);
  void record_memory(double time, const MemoryStats& stats);
  const std::vector<trace::Event>& events() const { return events_; }
  const std::vector<trace::CounterSample>& counters() const { return counters_; }
  std::vector<trace::Event> take_events() { return std::move(events_); }
  std::vector<trace::CounterSample> take_counters() { return std::move(counters_); }
  void clear();

 private:
  int rank_;
  std::vector<trace::Event> events_;
  std::vector<trace::CounterSample> counters_;
};

struct RankContext {
  RankContext(int rank, int world_size, Device device, HardwareProfile profile,
              ClockKind clock_kind, RankClock::Epoch epoch = std::chrono::steady_clock::now());
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;

  int rank;
  int world_size;
  Device device;
  HardwareProfile profile;
  Allocator allocator;
  RankClock clock;
  Tracer tracer;
  comm::Comm* comm = nullptr;  // the world communicator, owned by World
  // The all-reduce this rank's communicators run (the exercise's ring, reference or the
  // student's): World sets it from WorldOptions::all_reduce, groups made on this rank take it.
  comm::AllReduceFn all_reduce;

  // Installs the allocator listener that samples memory onto the trace (the constructor does;
  // code that listens to the allocator for a while puts it back with this).
  void trace_memory();

  // Open compute scopes (innermost last); kernels add their FLOPs and bytes to the innermost.
  struct OpenScope {
    trace::Event event;
    double flops = 0;
    double bytes = 0;
  };
  std::vector<OpenScope> scopes;
  // The step this rank is in (StepScope; -1 outside one) and the kernels it has run: what an
  // injected slow rank and the jitter (profile.faults) read.
  int step = -1;
  uint64_t kernels = 0;
};

RankContext& current_rank();

// Installs `ctx` as the calling thread's rank context for the lifetime of the guard.
class ScopedRank {
 public:
  explicit ScopedRank(RankContext& ctx);
  ~ScopedRank();
  ScopedRank(const ScopedRank&) = delete;
  ScopedRank& operator=(const ScopedRank&) = delete;

 private:
  RankContext* previous_;
};

// Every kernel opens one of these (one line at the top of the op): on the modeled clock it
// advances the compute lane by the roofline cost of (flops, bytes); it adds both to the
// enclosing ComputeScope; with no scope open it records an event of its own. `dtype` is the type
// the kernel computes in: its FLOPs are charged at the profile's peak for that type.
class KernelScope {
 public:
  KernelScope(const char* op, double flops, double bytes, DType dtype = DType::f32);
  // A kernel whose price depends on its shape (GEMMs, attention): see HardwareProfile::kernel_time.
  KernelScope(const char* op, const KernelCost& cost);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  RankContext& ctx_;
  const char* op_;
  KernelCost cost_;
  double start_;
};

// A named region of compute on this rank's compute lane, e.g. forward of micro-batch 3 on
// layer 2. Becomes one trace event spanning all the kernels inside it.
//   ComputeScope s({.name = "fwd", .cat = trace::cat::forward, .microbatch = mb});
class ComputeScope {
 public:
  explicit ComputeScope(trace::Event proto);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  RankContext& ctx_;
};

// Labels the comm events the calling rank records during its lifetime (Tracer::comm_label).
class CommLabelScope {
 public:
  explicit CommLabelScope(Tracer::CommLabel label);
  ~CommLabelScope();
  CommLabelScope(const CommLabelScope&) = delete;
  CommLabelScope& operator=(const CommLabelScope&) = delete;

 private:
  Tracer& tracer_;
  std::optional<Tracer::CommLabel> outer_;
};

// Marks one training step on the step lane (analysis measures bubbles per step).
class StepScope {
 public:
  explicit StepScope(int step);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  RankContext& ctx_;
  int step_;
  double start_;
};

}  // namespace mgpu

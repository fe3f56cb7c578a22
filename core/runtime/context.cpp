// The rank each thread runs as, and the scopes that put its kernels, regions and steps on its
// clock and into its trace (on the cuda clock, timed by CUDA events: CudaMarks).
#include "core/runtime/context.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/runtime/faults.h"
#include "core/runtime/gpu.h"

namespace mgpu {

namespace {
thread_local RankContext* t_current = nullptr;

// Code with no rank installed (tests, tools) gets a private CPU rank 0 per thread, with free
// kernels and no trace recording.
struct DefaultRank : RankContext {
  DefaultRank() : RankContext(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled) {
    tracer.enabled = false;
  }
};

// The cuda clock times what becomes a trace event (a step, a scope, a kernel outside scopes) by
// two marks, CUDA events on the rank's compute stream, so the host never waits for the GPU inside
// a step and keeps queueing kernels ahead of it. An event waits with its marks until the step
// ends (one wait for the GPU per step), or, outside a step, until the outermost region ends; then
// each mark is placed on the rank's wall axis from an anchor mark the host waited for when the
// thread first timed a region (placed times may be late by that wait, never early).
bool cuda_timed(const RankContext& ctx) {
  return ctx.clock.kind() == ClockKind::cuda && ctx.device.kind == DeviceKind::cuda;
}

class CudaMarks {
 public:
  CudaMarks() = default;
  CudaMarks(const CudaMarks&) = delete;
  CudaMarks& operator=(const CudaMarks&) = delete;
  ~CudaMarks() {
    for (cuda::Mark m : open_) cuda::release_mark(m);
    for (Pending& p : pending_) release(p);
    cuda::release_mark(anchor_);
  }

  // A region opens; `traced`: it will become an event (else only its place on the stack).
  void begin(RankContext& ctx, bool traced) {
    if (traced && !anchored_to(ctx)) anchor(ctx);
    open_.push_back(traced ? cuda::record_mark() : nullptr);
  }
  // The region opened last closes; `event` (null: none) waits for its marks to be placed.
  void end(RankContext& ctx, trace::Event* event) {
    cuda::Mark start = open_.back();
    open_.pop_back();
    if (!start || !event) return cuda::release_mark(start);
    pending_.push_back({&ctx.tracer, std::move(*event), start, cuda::record_mark()});
    if (steps == 0 && open_.empty()) place();
  }
  int steps = 0;  // open StepScopes

 private:
  struct Pending {
    Tracer* tracer;
    trace::Event event;
    cuda::Mark start, end;
  };
  static void release(Pending& p) {
    cuda::release_mark(p.start);
    cuda::release_mark(p.end);
  }
  bool anchored_to(const RankContext& ctx) const {
    return anchor_ && owner_ == &ctx && epoch_ == ctx.clock.epoch();
  }
  void anchor(RankContext& ctx) {
    place();  // marks of another rank's clock, if this thread switched ranks
    cuda::release_mark(anchor_);
    anchor_ = cuda::record_mark();
    cuda::wait_for(anchor_);
    anchor_time_ = ctx.clock.wall_now();
    owner_ = &ctx;
    epoch_ = ctx.clock.epoch();
  }
  // Waits for the GPU to pass the last mark (one stream: then it has passed them all), places
  // every waiting event and records it; the marks are released whatever happens.
  void place() {
    if (pending_.empty()) return;
    std::vector<Pending> waiting = std::exchange(pending_, {});
    struct ReleaseAll {
      std::vector<Pending>& marks;
      ~ReleaseAll() {
        for (Pending& p : marks) release(p);
      }
    } release_all{waiting};
    cuda::wait_for(waiting.back().end);
    for (Pending& p : waiting) {
      const double start = anchor_time_ + cuda::seconds_between(anchor_, p.start);
      const double end = anchor_time_ + cuda::seconds_between(anchor_, p.end);
      p.event.start = start;
      p.event.dur = std::max(0.0, end - start);
      p.tracer->record(std::move(p.event));
    }
  }

  std::vector<cuda::Mark> open_;  // start marks of the open regions, innermost last
  std::vector<Pending> pending_;
  cuda::Mark anchor_ = nullptr;
  double anchor_time_ = 0;
  const RankContext* owner_ = nullptr;
  RankClock::Epoch epoch_{};
};

CudaMarks& cuda_marks() {
  thread_local CudaMarks marks;
  return marks;
}

// A region's end on the cuda clock: its event waits for its marks; errors of CUDA are sticky and
// the next checked call reports them (this runs in destructors).
void end_cuda_region(RankContext& ctx, trace::Event* event) {
  try {
    cuda_marks().end(ctx, event);
  } catch (...) {
  }
}
void begin_cuda_region(RankContext& ctx, bool traced) {
  cuda_marks().begin(ctx, traced && ctx.tracer.enabled);
}

// A region's event: recorded now, or on the cuda clock once its marks are placed.
void record_region(RankContext& ctx, trace::Event& event) {
  if (cuda_timed(ctx))
    end_cuda_region(ctx, &event);
  else
    ctx.tracer.record(std::move(event));
}

RankContext& default_context() {
  thread_local DefaultRank ctx;
  return ctx;
}
}  // namespace

RankContext::RankContext(int rank_, int world_size_, Device device_, HardwareProfile profile_,
                         ClockKind clock_kind, RankClock::Epoch epoch)
    : rank(rank_),
      world_size(world_size_),
      device(device_),
      profile(std::move(profile_)),
      allocator(device_, profile.memory_capacity),
      clock(clock_kind, epoch),
      tracer(rank_) {
  trace_memory();
}

void RankContext::trace_memory() {
  allocator.set_listener(
      [this](const MemoryStats& s) { tracer.record_memory(clock.compute_now(), s); });
}

RankContext& current_rank() {
  return t_current ? *t_current : default_context();
}

ScopedRank::ScopedRank(RankContext& ctx) : previous_(t_current) {
  t_current = &ctx;
}
ScopedRank::~ScopedRank() {
  t_current = previous_;
}

KernelScope::KernelScope(const char* op, double flops, double bytes, DType dtype)
    : KernelScope(op, KernelCost{.flops = flops, .bytes = bytes, .dtype = dtype}) {}

KernelScope::KernelScope(const char* op, const KernelCost& cost)
    : ctx_(current_rank()), op_(op), cost_(cost) {
  // A kernel outside scopes is its own event.
  if (cuda_timed(ctx_)) begin_cuda_region(ctx_, ctx_.scopes.empty() || ctx_.tracer.record_kernels);
  start_ = ctx_.clock.compute_now();
}

namespace {
// The modeled time of a kernel starting at `start`: its price, plus the profile's slowdown for
// the part that runs while this rank's comm lane is still busy (a collective in flight shares
// the GPU's SMs and memory bandwidth with it).
double modeled_kernel_time(RankContext& ctx, const KernelCost& cost, double start) {
  double alone = ctx.profile.kernel_time(cost);
  if (!ctx.profile.faults.empty())  // an injected slow rank or jitter (core/runtime/faults.h)
    alone *= ctx.profile.faults.compute_factor(ctx.rank, ctx.step, ctx.kernels++);
  const double slowdown = ctx.profile.efficiency.overlap_slowdown;
  const double comm_busy_until = ctx.clock.comm_now();
  if (slowdown <= 0 || comm_busy_until <= start) return alone;
  // The overlapped part stretches by (1 + slowdown) until the collective ends.
  const double stretched = (comm_busy_until - start) / (1 + slowdown);
  return alone <= stretched ? alone * (1 + slowdown) : comm_busy_until - start + alone - stretched;
}
}  // namespace

KernelScope::~KernelScope() {
  if (ctx_.clock.modeled()) ctx_.clock.advance_compute(modeled_kernel_time(ctx_, cost_, start_));
  double end = ctx_.clock.compute_now();
  if (!ctx_.scopes.empty()) {
    ctx_.scopes.back().flops += cost_.flops;
    ctx_.scopes.back().bytes += cost_.bytes;
  }
  if (ctx_.scopes.empty() || ctx_.tracer.record_kernels) {
    trace::Event e;
    e.name = op_;
    e.cat = trace::cat::compute;
    e.lane = trace::Lane::compute;
    e.start = start_;
    e.dur = end - start_;
    e.flops = cost_.flops;
    e.bytes = static_cast<int64_t>(cost_.bytes);
    record_region(ctx_, e);
  } else if (cuda_timed(ctx_)) {
    end_cuda_region(ctx_, nullptr);  // untraced, but its place on the stack of regions
  }
}

ComputeScope::ComputeScope(trace::Event proto) : ctx_(current_rank()) {
  if (cuda_timed(ctx_)) begin_cuda_region(ctx_, true);
  proto.lane = trace::Lane::compute;
  proto.start = ctx_.clock.compute_now();
  ctx_.scopes.push_back({std::move(proto), 0, 0});
}

ComputeScope::~ComputeScope() {
  RankContext::OpenScope open = std::move(ctx_.scopes.back());
  ctx_.scopes.pop_back();
  open.event.dur = ctx_.clock.compute_now() - open.event.start;
  open.event.flops = open.flops;
  open.event.bytes = static_cast<int64_t>(open.bytes);
  if (!ctx_.scopes.empty()) {  // nested: the outer scope also did this work
    ctx_.scopes.back().flops += open.flops;
    ctx_.scopes.back().bytes += open.bytes;
  }
  record_region(ctx_, open.event);
}

StepScope::StepScope(int step) : ctx_(current_rank()), step_(step) {
  if (const std::optional<FailRank>& fail = ctx_.profile.faults.fail;
      fail && fail->rank == ctx_.rank && fail->step == step)
    throw RankLost(ctx_.rank, step);  // --fail-rank: this rank dies as its step begins
  ctx_.step = step;
  if (cuda_timed(ctx_)) {
    begin_cuda_region(ctx_, true);
    ++cuda_marks().steps;
  }
  start_ = ctx_.clock.compute_now();
}

StepScope::~StepScope() {
  trace::Event e;
  e.name = "step " + std::to_string(step_);
  e.cat = trace::cat::step;
  e.lane = trace::Lane::step;
  e.step = step_;
  e.start = start_;
  e.dur = std::max(ctx_.clock.compute_now(), ctx_.clock.comm_now()) - start_;
  if (cuda_timed(ctx_)) --cuda_marks().steps;  // so its end places the step's events
  record_region(ctx_, e);
}

CommLabelScope::CommLabelScope(Tracer::CommLabel label)
    : tracer_(current_rank().tracer), outer_(std::move(tracer_.comm_label)) {
  tracer_.comm_label = std::move(label);
}

CommLabelScope::~CommLabelScope() {
  tracer_.comm_label = std::move(outer_);
}

}  // namespace mgpu

#include "core/runtime/context.h"

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

// The cuda clock, simplest correct form: at the boundaries of what becomes a trace event, wait
// for the GPU work queued so far, so the wall time read there includes that work. (Kernels
// inside a scope still run asynchronously; see docs/cuda.md for the event-based alternative.)
void sync_if_cuda_clock(const RankContext& ctx) {
  if (ctx.clock.kind() != ClockKind::cuda || ctx.device.kind != DeviceKind::cuda) return;
  try {
    cuda::synchronize();
  } catch (...) {
    // Called from destructors: a CUDA error is sticky and the next checked call reports it.
  }
}

RankContext& default_context() {
  thread_local DefaultRank ctx;
  return ctx;
}
}  // namespace

void Tracer::record(trace::Event e) {
  if (!enabled) return;
  e.rank = rank_;
  if (comm_label && e.lane == trace::Lane::comm) {
    e.name = comm_label->name;
    if (comm_label->layer >= 0) e.layer = comm_label->layer;
    if (!comm_label->counts.empty()) e.counts = comm_label->counts;
  }
  events_.push_back(std::move(e));
}

void Tracer::record_memory(double time, const MemoryStats& stats) {
  if (!enabled) return;
  trace::CounterSample s;
  s.rank = rank_;
  s.time = time;
  s.bytes = stats.current;
  // Several changes at one instant (common on the modeled clock) keep the last value and every
  // value not below another one of that instant in every category, so the samples' maxima (per
  // category and in total) are the allocator's peaks: a buffer made and freed within an instant
  // still shows. A sample is dropped only when a kept one of its instant covers it.
  auto covered_by = [](const trace::CounterSample& a, const trace::CounterSample& b) {
    for (size_t c = 0; c < a.bytes.size(); ++c)
      if (a.bytes[c] > b.bytes[c]) return false;
    return true;
  };
  const size_t n = counters_.size();
  const bool same_instant = n > 0 && counters_[n - 1].time == time;
  const bool last_covered =
      same_instant &&
      (covered_by(counters_[n - 1], s) ||
       (n > 1 && counters_[n - 2].time == time && covered_by(counters_[n - 1], counters_[n - 2])));
  if (last_covered)
    counters_.back() = s;
  else
    counters_.push_back(s);
}

void Tracer::clear() {
  events_.clear();
  counters_.clear();
}

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
  if (ctx_.scopes.empty()) sync_if_cuda_clock(ctx_);  // a kernel outside scopes is its own event
  start_ = ctx_.clock.compute_now();
}

namespace {
// The modeled time of a kernel starting at `start`: its price, plus the profile's slowdown for
// the part that runs while this rank's comm lane is still busy (a collective in flight shares
// the GPU's SMs and memory bandwidth with it).
double modeled_kernel_time(const RankContext& ctx, const KernelCost& cost, double start) {
  const double alone = ctx.profile.kernel_time(cost);
  const double slowdown = ctx.profile.efficiency.overlap_slowdown;
  const double comm_busy_until = ctx.clock.comm_now();
  if (slowdown <= 0 || comm_busy_until <= start) return alone;
  // The overlapped part stretches by (1 + slowdown) until the collective ends.
  const double stretched = (comm_busy_until - start) / (1 + slowdown);
  return alone <= stretched ? alone * (1 + slowdown) : comm_busy_until - start + alone - stretched;
}
}  // namespace

KernelScope::~KernelScope() {
  if (ctx_.scopes.empty()) sync_if_cuda_clock(ctx_);
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
    ctx_.tracer.record(std::move(e));
  }
}

ComputeScope::ComputeScope(trace::Event proto) : ctx_(current_rank()) {
  sync_if_cuda_clock(ctx_);
  proto.lane = trace::Lane::compute;
  proto.start = ctx_.clock.compute_now();
  ctx_.scopes.push_back({std::move(proto), 0, 0});
}

ComputeScope::~ComputeScope() {
  sync_if_cuda_clock(ctx_);
  RankContext::OpenScope open = std::move(ctx_.scopes.back());
  ctx_.scopes.pop_back();
  open.event.dur = ctx_.clock.compute_now() - open.event.start;
  open.event.flops = open.flops;
  open.event.bytes = static_cast<int64_t>(open.bytes);
  if (!ctx_.scopes.empty()) {  // nested: the outer scope also did this work
    ctx_.scopes.back().flops += open.flops;
    ctx_.scopes.back().bytes += open.bytes;
  }
  ctx_.tracer.record(std::move(open.event));
}

StepScope::StepScope(int step) : ctx_(current_rank()), step_(step) {
  sync_if_cuda_clock(ctx_);
  start_ = ctx_.clock.compute_now();
}

StepScope::~StepScope() {
  sync_if_cuda_clock(ctx_);
  trace::Event e;
  e.name = "step " + std::to_string(step_);
  e.cat = trace::cat::step;
  e.lane = trace::Lane::step;
  e.step = step_;
  e.start = start_;
  e.dur = std::max(ctx_.clock.compute_now(), ctx_.clock.comm_now()) - start_;
  ctx_.tracer.record(std::move(e));
}

CommLabelScope::CommLabelScope(Tracer::CommLabel label)
    : tracer_(current_rank().tracer), outer_(std::move(tracer_.comm_label)) {
  tracer_.comm_label = std::move(label);
}

CommLabelScope::~CommLabelScope() {
  tracer_.comm_label = std::move(outer_);
}

}  // namespace mgpu

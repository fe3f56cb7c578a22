// Tracer: a rank's trace events and memory counter samples, as they are recorded (labels of the
// comm lane applied, or handed to a sink).
#include "core/runtime/context.h"

#include <cstddef>
#include <utility>

namespace mgpu {

void Tracer::record(trace::Event e) {
  if (!enabled) return;
  e.rank = rank_;
  if (comm_label && e.lane == trace::Lane::comm) {
    e.name = comm_label->name;
    if (comm_label->layer >= 0) e.layer = comm_label->layer;
    if (!comm_label->counts.empty()) e.counts = comm_label->counts;
  }
  if (sink) return sink(e);
  events_.push_back(std::move(e));
}

void Tracer::record_memory(double time, const MemoryStats& stats) {
  if (!enabled || sink) return;
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
}  // namespace mgpu

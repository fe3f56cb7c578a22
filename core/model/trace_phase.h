// The forward or backward region a layout runs its model under: one trace event (ComputeScope)
// per stretch of compute. A block pauses it while it communicates (Block's comm dispatch), so the
// timeline shows the compute lane waiting for its group rather than "busy" through a collective;
// the linears' kernels and the collectives record their own events meanwhile.
#pragma once
#include <optional>
#include <string>

#include "core/runtime/context.h"

namespace mgpu {

class TracePhase {
 public:
  // Closes the open region (if any) and opens `name` in category `cat`.
  void open(const std::string& name, const std::string& cat) {
    proto_ = {.name = name, .cat = cat};
    scope_.emplace(proto_);
  }
  void close() { scope_.reset(); }
  // fn() with the region closed, reopened after it (if it was open).
  template <class Fn>
  void paused(Fn&& fn) {
    const bool open = scope_.has_value();
    scope_.reset();
    fn();
    if (open) scope_.emplace(proto_);
  }
  const std::string& category() const { return proto_.cat; }

 private:
  trace::Event proto_;
  std::optional<ComputeScope> scope_;
};

// fn() with `phase` (if any) paused around it: a block's call into a comm object.
template <class Fn>
void with_phase_paused(TracePhase* phase, Fn&& fn) {
  if (phase)
    phase->paused(fn);
  else
    fn();
}

}  // namespace mgpu

#include "core/runtime/trace_event.h"

#include <algorithm>

namespace mgpu::trace {

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::compute:
      return "compute";
    case Lane::comm:
      return "comm";
    case Lane::step:
      return "step";
  }
  return "?";
}

Event comm_event(const char* op, double start, double end, int64_t bytes, int64_t sent_bytes,
                 const std::string& group, double wait) {
  Event e;
  e.name = op;
  e.op = op;
  e.cat = cat::comm;
  e.lane = Lane::comm;
  e.start = start;
  e.dur = end - start;
  e.bytes = bytes;
  e.sent_bytes = sent_bytes;
  e.wait = std::clamp(wait, 0.0, e.dur);
  e.group = group;
  return e;
}

}  // namespace mgpu::trace

#include "core/trace/event.h"

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

}  // namespace mgpu::trace

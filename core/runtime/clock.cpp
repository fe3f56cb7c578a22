#include "core/runtime/clock.h"

#include <stdexcept>

namespace mgpu {

ClockKind parse_clock_kind(const std::string& text) {
  if (text == "modeled") return ClockKind::modeled;
  if (text == "wall") return ClockKind::wall;
  if (text == "cuda") return ClockKind::cuda;
  throw std::invalid_argument("unknown clock '" + text + "' (use modeled, wall or cuda)");
}

const char* clock_name(ClockKind k) {
  switch (k) {
    case ClockKind::modeled:
      return "modeled";
    case ClockKind::wall:
      return "wall";
    case ClockKind::cuda:
      return "cuda";
  }
  return "?";
}

}  // namespace mgpu

#include "core/runtime/device.h"

#include <stdexcept>

namespace mgpu {

std::string Device::str() const {
  switch (kind) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::cuda:
      return "cuda:" + std::to_string(index);
    case DeviceKind::phantom:
      return "phantom";
  }
  return "?";
}

DeviceKind parse_device_kind(const std::string& text) {
  if (text == "cpu") return DeviceKind::cpu;
  if (text == "phantom") return DeviceKind::phantom;
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) return DeviceKind::cuda;
  throw std::invalid_argument("unknown device '" + text + "' (use cpu, cuda or phantom)");
}

}  // namespace mgpu

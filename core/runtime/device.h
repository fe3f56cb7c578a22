// Where a rank's tensors live: a CPU "virtual GPU" in host memory, a real CUDA GPU, or a phantom
// device that keeps shapes only (kernels report FLOPs and bytes but do no math).
#pragma once
#include <string>

namespace mgpu {

enum class DeviceKind : uint8_t { cpu, cuda, phantom };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // GPU ordinal for cuda; rank's virtual-GPU number for cpu/phantom

  bool has_data() const { return kind != DeviceKind::phantom; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:1", "phantom"

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  static Device phantom(int index = 0) { return {DeviceKind::phantom, index}; }
};

// "cpu" | "cuda" | "cuda:K" | "phantom" -> kind; throws std::invalid_argument otherwise.
DeviceKind parse_device_kind(const std::string& text);

}  // namespace mgpu

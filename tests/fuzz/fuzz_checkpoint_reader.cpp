// Fuzz target: the checkpoint reader (safetensors, mgpu version 3; older formats are refused).
// Any input either loads or raises std::invalid_argument naming the problem.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/model/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    mgpu::parse_checkpoint_bytes("fuzz", std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

// Storage for the memory estimator seams (see seams.h).
#include "core/memory/seams.h"

#include <optional>
#include <stdexcept>

namespace mgpu::memory {

namespace {
std::optional<MemorySeams>& installed_seams() {
  static std::optional<MemorySeams> seams;
  return seams;
}
}  // namespace

void install_memory_seams(MemorySeams seams) {
  installed_seams() = std::move(seams);
}

const MemorySeams& memory_seams() {
  const auto& seams = installed_seams();
  const char* missing = !seams || !seams->gpt_param_count ? "gpt_param_count"
                        : !seams->estimate_memory         ? "estimate_memory"
                                                          : nullptr;
  if (missing)
    throw std::logic_error(std::string("memory seam '") + missing +
                           "' is not installed: call mgpu::reference::install_seams() (or "
                           "mgpu::mine::install_seams()) first");
  return *seams;
}

}  // namespace mgpu::memory

// Storage for the bubble accounting seam (see bubble_seams.h).
#include "core/trace/bubble_seams.h"

#include <optional>
#include <stdexcept>

namespace mgpu::trace {

namespace {
std::optional<BubbleSeams>& installed_seams() {
  static std::optional<BubbleSeams> seams;
  return seams;
}
}  // namespace

void install_bubble_seams(BubbleSeams seams) {
  installed_seams() = std::move(seams);
}

const BubbleSeams& bubble_seams() {
  const auto& seams = installed_seams();
  if (!seams || !seams->bubble_accounting)
    throw std::logic_error(
        "bubble accounting seam is not installed: call mgpu::reference::install_seams() (or "
        "mgpu::mine::install_seams()) first");
  return *seams;
}

}  // namespace mgpu::trace

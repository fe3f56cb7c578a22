// Storage for the DDP bucket seams (see ddp_seams.h).
#include "core/parallel/ddp_seams.h"

#include <optional>
#include <stdexcept>

namespace mgpu::parallel {

namespace {
std::optional<DdpSeams>& installed_seams() {
  static std::optional<DdpSeams> seams;
  return seams;
}
}  // namespace

void install_ddp_seams(DdpSeams seams) {
  installed_seams() = std::move(seams);
}

const DdpSeams& ddp_seams() {
  const auto& seams = installed_seams();
  const char* missing = !seams || !seams->assign_buckets ? "assign_buckets"
                        : !seams->bucket_ready           ? "bucket_ready"
                                                         : nullptr;
  if (missing)
    throw std::logic_error(std::string("ddp seam '") + missing +
                           "' is not installed: call mgpu::reference::install_seams() or "
                           "mgpu::mine::install_seams() before running DDP");
  return *seams;
}

}  // namespace mgpu::parallel

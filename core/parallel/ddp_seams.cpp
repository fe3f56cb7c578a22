// Storage for the DDP bucket seams (see ddp_seams.h).
#include "core/parallel/ddp_seams.h"

#include "core/runtime/seam.h"

namespace mgpu::parallel {

void install_ddp_seams(DdpSeams seams) {
  Seam<DdpSeams>::install(std::move(seams));
}

const DdpSeams& ddp_seams() {
  return Seam<DdpSeams>::get("ddp seam", Required{"assign_buckets", &DdpSeams::assign_buckets},
                             Required{"bucket_ready", &DdpSeams::bucket_ready});
}

}  // namespace mgpu::parallel

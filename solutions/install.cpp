// Installs the reference implementations into core's seams (the default, `--impl reference`).
#include "core/comm/seams.h"
#include "exercises/exercises.h"

namespace mgpu::reference {

void install_seams() {
  parallel::install_ddp_seams({"reference", &reference::assign_buckets, &reference::bucket_ready});
  comm::install_comm_seams({"reference", &reference::ring_all_reduce});
}

}  // namespace mgpu::reference

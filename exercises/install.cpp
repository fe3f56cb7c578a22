// Installs the student's implementations into core's seams (`--impl mine`).
#include "core/comm/seams.h"
#include "core/parallel/pipeline/seams.h"
#include "exercises/exercises.h"

namespace mgpu::mine {

void install_seams() {
  parallel::install_ddp_seams({"mine", &mine::assign_buckets, &mine::bucket_ready});
  comm::install_comm_seams({"mine", &mine::ring_all_reduce});
  pipeline::install_pipeline_seams(
      {"mine", &mine::gpipe_compute_order, &mine::one_f_one_b_compute_order});
}

}  // namespace mgpu::mine

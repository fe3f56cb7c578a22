// Installs the reference implementations into core's seams (the default, `--impl reference`).
#include "core/comm/seams.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/tensor_parallel.h"
#include "exercises/exercises.h"

namespace mgpu::reference {

void install_seams() {
  parallel::install_ddp_seams({"reference", &reference::assign_buckets, &reference::bucket_ready});
  comm::install_comm_seams({"reference", &reference::ring_all_reduce});
  pipeline::install_pipeline_seams(
      {"reference", &reference::gpipe_compute_order, &reference::one_f_one_b_compute_order});
  parallel::install_tp_seams({"reference", &reference::column_parallel_forward,
                              &reference::column_parallel_backward,
                              &reference::row_parallel_forward, &reference::row_parallel_backward});
}

}  // namespace mgpu::reference

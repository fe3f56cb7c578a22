// Exercise 02: DDP gradient buckets. Replace the bodies with your implementation (see
// docs/exercises/02-ddp-buckets.md), then run a lesson with --impl mine: your buckets drive the
// DDP timeline.
#include "exercises/exercises.h"

namespace mgpu::mine {

parallel::BucketPlan assign_buckets(const std::vector<int64_t>& param_bytes_in_backward_order,
                                    int64_t bucket_bytes) {
  (void)param_bytes_in_backward_order;
  (void)bucket_bytes;
  throw ex::NotImplemented("not implemented yet: see docs/exercises/02-ddp-buckets.md");
}

bool bucket_ready(const parallel::BucketPlan& plan, int bucket,
                  const std::vector<bool>& grad_final) {
  (void)plan;
  (void)bucket;
  (void)grad_final;
  throw ex::NotImplemented("not implemented yet: see docs/exercises/02-ddp-buckets.md");
}

}  // namespace mgpu::mine

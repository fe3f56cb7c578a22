// Exercise 02, reference: DDP gradient buckets. Gradients are packed in backward order, so the
// first bucket fills with the gradients backward finishes first (the head) and can be all-reduced
// while backward still runs on the earlier layers.
#include <stdexcept>
#include <string>

#include "exercises/exercises.h"

namespace mgpu::reference {

parallel::BucketPlan assign_buckets(const std::vector<int64_t>& param_bytes_in_backward_order,
                                    int64_t bucket_bytes) {
  if (bucket_bytes <= 0)
    throw std::invalid_argument("bucket size must be positive, got " +
                                std::to_string(bucket_bytes) + " bytes");
  parallel::BucketPlan plan;
  int64_t filled = 0;  // bytes in the last (open) bucket
  for (int i = 0; i < static_cast<int>(param_bytes_in_backward_order.size()); ++i) {
    int64_t bytes = param_bytes_in_backward_order[i];
    // Open a new bucket when this gradient would overflow the current one. A gradient larger than
    // the cap therefore lands alone in a fresh bucket (and the next one starts another).
    if (plan.buckets.empty() || filled + bytes > bucket_bytes) {
      plan.buckets.emplace_back();
      filled = 0;
    }
    plan.buckets.back().push_back(i);
    filled += bytes;
  }
  return plan;
}

bool bucket_ready(const parallel::BucketPlan& plan, int bucket,
                  const std::vector<bool>& grad_final) {
  for (int i : plan.buckets.at(static_cast<size_t>(bucket)))
    if (!grad_final.at(static_cast<size_t>(i))) return false;
  return true;
}

}  // namespace mgpu::reference

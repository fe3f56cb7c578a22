// Exercise seam for DDP gradient buckets (exercise 02: docs/exercises/02-ddp-buckets.md).
// DDP packs gradients into buckets so it can all-reduce a few large buffers instead of many small
// tensors, and issues each bucket as soon as backward has finished every gradient in it. How the
// buckets are packed and when one is ready are the pieces a student re-implements: core declares
// them here, solutions/ddp_buckets.cpp holds the reference, exercises/ddp_buckets.cpp the
// student's; the program picks one table (`--impl reference|mine`) and hands it to every DDP it
// builds. core/parallel/ddp.cpp only ever calls the table it was given.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mgpu::parallel {

// Gradient indices per bucket. Index i means the i-th gradient in BACKWARD order (the order in
// which backward finishes them: head first, embedding last). Buckets are listed in the order they
// will be all-reduced; every index appears in exactly one bucket.
struct BucketPlan {
  std::vector<std::vector<int>> buckets;
  bool operator==(const BucketPlan&) const = default;
};

// Packs gradients, in backward order, into consecutive buckets of at most `bucket_bytes` bytes; a
// single gradient larger than the cap gets a bucket of its own. bucket_bytes <= 0 is an error.
using AssignBucketsFn = std::function<BucketPlan(
    const std::vector<int64_t>& param_bytes_in_backward_order, int64_t bucket_bytes)>;
// True when every gradient of `bucket` is final (grad_final[i] for backward index i), i.e. the
// bucket may be all-reduced now.
using BucketReadyFn =
    std::function<bool(const BucketPlan& plan, int bucket, const std::vector<bool>& grad_final)>;

struct DdpSeams {
  std::string impl_name;  // "reference" or "mine"
  AssignBucketsFn assign_buckets;
  BucketReadyFn bucket_ready;
};

}  // namespace mgpu::parallel

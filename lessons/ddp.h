// The data-parallel lessons (data_parallel, ddp, grad_accum) share one runner: the same model,
// data and optimizer as single_device, the global batch sharded over the ranks, and either the
// naive single-driver scheme or DDP (buckets, overlap, gradient accumulation). Tests call the
// runner directly and compare its parameters with the single-device reference.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct DataParallelOptions {
  bool naive = false;   // true: single-driver DataParallel; false: DDP
  bool overlap = true;  // DDP: bucketed async all-reduce during backward (--overlap on|off)
  std::string bucket_mb = "auto";  // DDP bucket cap in MB (1e6 bytes); auto = gradient bytes / 4
  int accum = 1;                   // micro-steps per optimizer step (--accum)
  int batch_per_rank = 0;  // 0: --batch is the global batch; else global = this x ranks x accum
  bool planted_same_shard = false;  // a sampler bug for tests: every rank trains on shard 0
  bool log_losses = true;           // print the loss log (off for the lessons' comparison runs)
};

struct DataParallelResult {
  std::vector<float> losses;               // mean over the global batch, one per step
  std::vector<std::vector<float>> params;  // rank 0's final parameters, forward order
  trace::Trace trace;
  int global_batch = 0;
  int64_t gradient_bytes = 0;  // per rank, all-reduced once per optimizer step (DDP)
  int64_t bucket_bytes = 0;    // the cap used (DDP, overlap on)
  int buckets = 0;
  double step_seconds = 0;  // the last step's span (modeled or wall)
  double wall_seconds = 0;
  std::string shard_problem;  // check_shards_partition on the last step ("" = a partition)
  int first_step = 0;         // > 0 when resumed (--resume)
  bool checkpoint_written = false;
  bool fresh_optimizer = false;  // resumed from a parameters-only checkpoint
};

// The global batch the options describe; throws UsageError when it does not divide into ranks x
// accumulation steps ("global batch 10 is not divisible by 4 ranks x 1 accumulation steps: ...").
int resolve_global_batch(const CommonOptions& c, const DataParallelOptions& d);
DataParallelResult train_data_parallel(const CommonOptions& c, const DataParallelOptions& d,
                                       std::ostream& out);
// The single-device run on the same global batch (the baseline every paradigm must reproduce).
std::vector<std::vector<float>> train_single_device_params(const CommonOptions& c,
                                                           int global_batch);
// The bucket cap in bytes for `gradient_bytes` of gradients; throws UsageError unless --bucket-mb
// is "auto" or a positive number.
int64_t resolve_bucket_bytes(const DataParallelOptions& d, int64_t gradient_bytes);
// Largest |a - b| over all parameters.
float max_param_difference(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b);

// --overlap, --bucket-mb, --accum, --batch-per-rank (those the lesson uses).
void add_data_parallel_options(CLI::App& app, DataParallelOptions& d, bool ddp_options,
                               bool accum_option);

std::unique_ptr<Lesson> make_data_parallel_lesson();
std::unique_ptr<Lesson> make_ddp_lesson();
std::unique_ptr<Lesson> make_grad_accum_lesson();

}  // namespace mgpu::lessons

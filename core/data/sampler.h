// Splitting a global batch: across data-parallel ranks (ShardedSampler) and into micro-batches
// (gradient accumulation, pipeline parallelism).
//
// Rank r of N gets the contiguous rows [r * B/N, (r+1) * B/N) of the global batch of step k. The
// shards are disjoint, their union in rank order is the global batch, and averaging the N shard
// gradients gives exactly the gradient of the global batch: that is why data parallelism trains
// to the same parameters as one device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/task.h"

namespace mgpu::data {

// A half-open range of rows of a batch.
struct RowRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Rows of shard `index` out of `parts` equal parts of `batch` rows. Throws std::invalid_argument
// when `parts` does not divide `batch` ("global batch 10 is not divisible by 4 ranks: use a batch
// of 8 or 12"); `what` names the parts in that message ("ranks", "micro-batches").
RowRange shard_rows(int batch, int parts, int index, const std::string& what = "ranks");

// Rank `rank` of `world` samples only its own rows of each step's global batch. Keeps a
// reference to `task`, which must outlive the sampler.
class ShardedSampler {
 public:
  ShardedSampler(const Task& task, int global_batch, int seq, int rank, int world);

  // This rank's shard of the global batch of `step`.
  Batch shard(int64_t step) const;
  // The whole global batch of `step` (what a single device would train on).
  Batch global(int64_t step) const { return task_.sample(step, global_batch_, seq_); }

  int global_batch() const { return global_batch_; }
  int local_batch() const { return rows_.size(); }
  RowRange rows() const { return rows_; }
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  const Task& task_;
  int global_batch_, seq_, rank_, world_;
  RowRange rows_;
};

// Splits `batch` into `micro_batches` equal consecutive pieces (same divisibility error).
std::vector<Batch> split_micro_batches(const Batch& batch, int micro_batches);

// Checks that `shards` (in rank order) partition `global`: same width, the row counts add up,
// and concatenated they reproduce the global batch row for row. Returns "" when they do, or a
// sentence saying what is wrong (e.g. every rank got the same rows). Tests and lessons use it to
// catch sampler bugs such as every rank training on shard 0.
std::string check_shards_partition(const Batch& global, const std::vector<Batch>& shards);

}  // namespace mgpu::data

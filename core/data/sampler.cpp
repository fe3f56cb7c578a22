#include "core/data/sampler.h"

#include <stdexcept>

#include <fmt/format.h>

namespace mgpu::data {

RowRange shard_rows(int batch, int parts, int index, const std::string& what) {
  if (parts < 1)
    throw std::invalid_argument(fmt::format("need at least 1 of {}, got {}", what, parts));
  if (batch < 1)
    throw std::invalid_argument(fmt::format("global batch must be >= 1, got {}", batch));
  if (batch % parts != 0) {
    // Suggest the nearest batches that do divide: the multiples of `parts` around `batch`.
    int below = batch / parts * parts, above = below + parts;
    std::string options =
        below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above);
    throw std::invalid_argument(
        fmt::format("global batch {} is not divisible by {} {}: use a batch of {}", batch, parts,
                    what, options));
  }
  if (index < 0 || index >= parts)
    throw std::out_of_range(fmt::format("shard {} of {} {}", index, parts, what));
  int per = batch / parts;
  return {index * per, (index + 1) * per};
}

ShardedSampler::ShardedSampler(const Task& task, int global_batch, int seq, int rank, int world)
    : task_(task),
      global_batch_(global_batch),
      seq_(seq),
      rank_(rank),
      world_(world),
      rows_(shard_rows(global_batch, world, rank, "ranks")) {}

Batch ShardedSampler::shard(int64_t step) const {
  // Generate only our rows: row r depends on (seed, step, r), never on the rank count.
  return task_.sample_rows(step, rows_.begin, rows_.end, seq_);
}

std::vector<Batch> split_micro_batches(const Batch& batch, int micro_batches) {
  shard_rows(batch.B, micro_batches, 0, "micro-batches");  // validates before any work
  std::vector<Batch> out;
  for (int m = 0; m < micro_batches; ++m) {
    RowRange r = shard_rows(batch.B, micro_batches, m, "micro-batches");
    out.push_back(batch.rows(r.begin, r.end));
  }
  return out;
}

std::string check_shards_partition(const Batch& global, const std::vector<Batch>& shards) {
  if (shards.empty()) return "no shards given";
  int rows = 0;
  for (size_t r = 0; r < shards.size(); ++r) {
    if (shards[r].T != global.T)
      return fmt::format("rank {} has sequences of {} tokens, the global batch {}", r, shards[r].T,
                         global.T);
    rows += shards[r].B;
  }
  if (rows != global.B)
    return fmt::format("the shards hold {} rows in all, the global batch {}", rows, global.B);
  // Every rank's rows must be the next rows of the global batch, in rank order.
  int next = 0;
  for (size_t r = 0; r < shards.size(); ++r) {
    Batch expected = global.rows(next, next + shards[r].B);
    if (shards[r] != expected) {
      for (size_t q = 0; q < r; ++q)
        if (shards[q] == shards[r])
          return fmt::format(
              "rank {} got the same rows as rank {}: the shards overlap (does every rank take "
              "shard 0?)",
              r, q);
      return fmt::format("rank {} does not hold rows [{}, {}) of the global batch", r, next,
                         next + shards[r].B);
    }
    next += shards[r].B;
  }
  return "";
}

}  // namespace mgpu::data

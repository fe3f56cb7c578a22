// Internal to the trainer: the global batches the rank threads of a process share, one copy per
// step (used by the training loop in trainer.cpp).
#pragma once
#include <map>
#include <memory>
#include <mutex>

#include "core/data/task.h"
#include "core/train/trainer.h"

namespace mgpu::train::trainer_detail {

// Every rank trains on the same global batch, a pure function of the step: the rank threads of a
// process share one copy per step instead of each sampling (and holding) its own. The last rank
// to take a step's batch drops it from the cache; each rank keeps its pointer while it trains.
class SharedBatches {
 public:
  SharedBatches(const data::Task& task, const TrainOptions& options, int ranks)
      : task_(task), options_(options), ranks_(ranks) {}

  std::shared_ptr<const data::Batch> take(int step) {
    std::lock_guard lock(mutex_);
    Entry& entry = by_step_[step];
    if (!entry.batch)
      entry.batch = std::make_shared<const data::Batch>(
          task_.sample(step, options_.global_batch, options_.seq));
    std::shared_ptr<const data::Batch> batch = entry.batch;
    if (++entry.taken == ranks_) by_step_.erase(step);
    return batch;
  }

 private:
  struct Entry {
    std::shared_ptr<const data::Batch> batch;
    int taken = 0;
  };
  const data::Task& task_;
  const TrainOptions& options_;
  const int ranks_;
  std::mutex mutex_;
  std::map<int, Entry> by_step_;
};

}  // namespace mgpu::train::trainer_detail

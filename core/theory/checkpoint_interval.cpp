// Young's wasted fraction and a seeded replay of a job under failures
// (checkpoint_interval.h).
#include "core/theory/checkpoint_interval.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace mgpu::theory {

double checkpoint_waste(double interval, double checkpoint_cost, double mtbf) {
  return checkpoint_cost / interval + interval / (2 * mtbf);
}

double CheckpointRun::waste() const {
  return wall > 0 ? 1 - work / wall : 0;
}

CheckpointRun simulate_checkpointing(double work, double interval, double checkpoint_cost,
                                     double mtbf, double restart, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Exponential by inversion from 53 random bits: the same draws on every standard library.
  auto next_gap = [&] { return -mtbf * std::log1p(-static_cast<double>(rng() >> 11) * 0x1.0p-53); };
  CheckpointRun run;
  run.work = work;
  double done = 0;  // work saved in a checkpoint (or finished)
  double failure_at = next_gap();
  while (done < work) {
    const double segment = std::min(interval, work - done);
    const double save = done + segment < work ? checkpoint_cost : 0;  // the end needs none
    if (run.wall + segment + save <= failure_at) {
      run.wall += segment + save;
      run.saving += save;
      done += segment;
      continue;
    }
    run.lost += std::min(failure_at - run.wall, segment);  // the work since the checkpoint
    run.saving += std::max(0.0, failure_at - run.wall - segment);
    run.wall = failure_at + restart;
    ++run.failures;
    failure_at = run.wall + next_gap();
  }
  return run;
}

}  // namespace mgpu::theory

// How often to checkpoint when ranks fail. A job that checkpoints every tau seconds of work, at
// a cost of C seconds per checkpoint, loses on average half an interval of work per failure; with
// failures every M seconds (the job's mean time between failures) the wasted fraction is about
//   C / tau + tau / (2 M)        (Young 1974, first order; Daly 2006 refines it)
// minimised at tau* = sqrt(2 C M). The sweep below replays a job under seeded exponential
// failures, so the closed form can stand beside a simulation of the same assumptions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace mgpu::theory {

// Exercise 10's seam (docs/exercises/10-checkpoint-interval.md): Young's optimum interval,
// sqrt(2 x checkpoint_cost x mtbf), and the work a failure at `failed_step` loses when
// --checkpoint-every is `every` (0: no checkpoint): the steps since the last checkpoint times the
// step time. The reference is solutions/checkpoint_interval.cpp; core holds no copy.
struct LostWork {
  int saved_step = 0;  // the step the last checkpoint holds (0: none, start over)
  double seconds = 0;  // (failed_step - saved_step) x step_seconds
};
using OptimalIntervalFn = std::function<double(double checkpoint_cost, double mtbf)>;
using LostWorkFn = std::function<LostWork(int failed_step, int every, double step_seconds)>;
struct CheckpointSeams {
  std::string impl_name;  // "reference" or "mine"
  OptimalIntervalFn optimal_interval;
  LostWorkFn lost_work;
};

// Young's first-order wasted fraction of wall time: C / tau + tau / (2 M).
double checkpoint_waste(double interval, double checkpoint_cost, double mtbf);

// One replayed job: `work` seconds of training, a checkpoint after every `interval` seconds of
// it costing `checkpoint_cost`, failures drawn exponential with mean `mtbf` (std::mt19937_64 from
// `seed`), each failure costing `restart` seconds and the work since the last checkpoint.
struct CheckpointRun {
  double wall = 0;    // seconds until the work is done
  double lost = 0;    // seconds of work redone
  double saving = 0;  // seconds spent writing checkpoints
  int64_t failures = 0;
  double waste() const;  // 1 - work / wall
  double work = 0;
};
CheckpointRun simulate_checkpointing(double work, double interval, double checkpoint_cost,
                                     double mtbf, double restart, uint64_t seed);

}  // namespace mgpu::theory

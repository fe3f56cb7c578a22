// Lesson 18 — the fault lab: stragglers, slow links, lost ranks and the checkpoint interval
// (lessons/faults.cpp, faults_survival.cpp), callable from tests.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/trace/analysis.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// `c` quiet, without files (trace, checkpoints, resume) and without injected faults: the base of
// each of the lab's runs.
CommonOptions fault_free(const CommonOptions& c);

// One straggler's effect on a run, from the traces of the run without and with it (the same
// step): per rank, within its own step, the busy time and the time spent waiting in
// communication.
struct StragglerEffect {
  int straggler = -1;
  std::vector<double> busy_base, busy_slow, wait_base, wait_slow;  // per rank
  double step_base = 0, step_slow = 0;                             // the longest rank's step
  double excess() const;  // the straggler's busy time beyond the mean of the others'

  double others_wait() const;  // the others' mean added waiting (slow - base)
};
StragglerEffect straggler_effect(const trace::Trace& base, const trace::Trace& slow, int step,
                                 int straggler);

// A ring all-reduce of `bytes` over `c.ranks` threads under `c`'s faults: the time it took on
// the modeled clock (rank 0's event).
double timed_ring_all_reduce(const CommonOptions& c, int64_t bytes);

// Survival (faults_survival.cpp): a run lost at --fail-rank's step, resumed from its last
// checkpoint on half the ranks, compared with an uninterrupted run; then the checkpoint interval.
int print_survival(const CommonOptions& c, std::ostream& out);
void print_checkpoint_interval(std::ostream& out, double checkpoint_cost, double mtbf_hours);

std::unique_ptr<Lesson> make_faults_lesson();

}  // namespace mgpu::lessons

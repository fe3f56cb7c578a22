// The expert-parallel lesson's report: what the trace and the allocator measured, beside the
// closed forms of core/theory/expert_parallel.h.
#pragma once
#include <iosfwd>

#include "lessons/expert_parallel.h"

namespace mgpu::lessons {

// Tokens per expert per rank (the router's imbalance), dropped tokens against the capacity rule,
// the all-to-all bytes per MoE layer and the memory per rank, for the run's last step.
void print_expert_report(std::ostream& out, const CommonOptions& c, const ExpertParallelResult& r);
// The second act: a short dropless run with the router skewed towards expert 0 (`skewed`) beside
// the same run routed as trained (`plain`): per GPU, expert rows computed, all-to-all bytes sent,
// busy time and time spent waiting for partners, in the last step.
void print_skew_act(std::ostream& out, const CommonOptions& c, double skew,
                    const ExpertParallelResult& plain, const ExpertParallelResult& skewed);

}  // namespace mgpu::lessons

// Checking a schedule before it runs: every micro-batch is computed exactly once per model chunk,
// backward after forward, every recv has its send (and the reverse), data arrives through a recv
// before it is used, and executing the lists (send never blocks, recv blocks) cannot deadlock.
#pragma once
#include <stdexcept>
#include <string>

#include "core/parallel/pipeline/schedule.h"

namespace mgpu::pipeline {

struct ValidationResult {
  bool ok = true;
  std::string message;  // one problem per line, each naming the stage and the offending action
};

class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

ValidationResult validate_schedule(const Schedule& schedule);
// Same checks; throws ScheduleError with the message when something is wrong.
void check_schedule(const Schedule& schedule);

// Executes the lists with zero-time compute, buffered sends and blocking recvs. Returns an empty
// string when every stage finishes, otherwise the circular wait:
// "deadlock: stage 1 blocked at recv_grad mb2 from stage 2; stage 2 blocked at recv_activation mb3
// from stage 1".
std::string find_deadlock(const Schedule& schedule);

}  // namespace mgpu::pipeline

// Exercise 03's two schedules: the compute order from a seams table, the messages from
// with_communication (schedule.cpp).
#include "core/parallel/pipeline/seams.h"
#include "core/theory/schedule_kind.h"

#include <stdexcept>
#include <string>

namespace mgpu::pipeline {

// GPipe (all forwards, then all backwards) and 1F1B (warmup forwards, then one forward one
// backward, then the drain): their compute order is exercise 03, so it comes from the seams the
// caller passes (solutions/pipeline_schedules.cpp holds the reference); the messages are added
// here.
namespace {
const ComputeOrderFn& required(const ComputeOrderFn& fn, const char* name) {
  if (!fn) throw std::logic_error(std::string("pipeline schedule seam: '") + name + "' is empty");
  return fn;
}
}  // namespace

Schedule gpipe_schedule(int stages, int microbatches, const PipelineSeams& seams) {
  return with_communication(
      theory::schedule_name(theory::ScheduleKind::gpipe), stages, microbatches, 1,
      required(seams.gpipe, theory::schedule_name(theory::ScheduleKind::gpipe))(stages,
                                                                                microbatches));
}

Schedule one_f_one_b_schedule(int stages, int microbatches, const PipelineSeams& seams) {
  return with_communication(theory::schedule_name(theory::ScheduleKind::one_f_one_b), stages,
                            microbatches, 1,
                            required(seams.one_f_one_b, "one_f_one_b")(stages, microbatches));
}

}  // namespace mgpu::pipeline

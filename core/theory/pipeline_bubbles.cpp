// The planner's screen formulas of the pipeline (see pipeline_bubbles.h).
#include "core/theory/pipeline_bubbles.h"

#include <algorithm>

#include "core/theory/schedule_kind.h"

namespace mgpu::theory {

namespace {
// A name the registry does not know is priced as 1F1B (the planner only passes known ones).
ScheduleKind kind_of(const std::string& schedule) {
  return find_schedule(schedule).value_or(ScheduleKind::one_f_one_b);
}
}  // namespace

double bubble_in_microbatches(const std::string& schedule, int pp, int virtual_stages) {
  const ChunkCosts stage{1, 2, 1}, chunk{0.5, 1, 0.5};
  switch (kind_of(schedule)) {
    case ScheduleKind::interleaved:
      return (pp - 1.0) / virtual_stages;
    case ScheduleKind::zb_h1:
      return bubble_zb1p(pp, stage) / 3;
    case ScheduleKind::zbv:
      return bubble_zbv(pp, chunk) / 3;
    case ScheduleKind::dualpipev:
      return bubble_dualpipe(2 * pp, chunk) / 3;
    case ScheduleKind::dualpipe:
      return bubble_dualpipe(pp, stage) / 3;
    default:
      return pp - 1.0;
  }
}

double microbatches_in_flight(const std::string& schedule, int pp, int virtual_stages,
                              int microbatches) {
  switch (kind_of(schedule)) {
    case ScheduleKind::gpipe:
      return microbatches;
    case ScheduleKind::interleaved:
      return std::min<double>(pp + (pp - 1.0) / virtual_stages, microbatches);
    case ScheduleKind::zb_h1:
      return std::min(2 * pp - 1, microbatches);
    case ScheduleKind::zbv:
      return peak_chunks_1f1b(2 * pp) / 2.0;
    case ScheduleKind::dualpipev:
      return peak_chunks_dualpipe(2 * pp) / 2.0;
    case ScheduleKind::dualpipe:
      return peak_chunks_dualpipe(pp);
    default:
      return std::min(pp, microbatches);
  }
}

bool pipeline_stages_fit(int layers, int pp) {
  if (pp < 1 || layers < pp) return false;
  if (layers % pp == 0) return true;
  const double fullest = layers / pp + 1, mean = double(layers) / pp;
  return fullest <= mean * (1 + kMaxStageImbalance);
}

}  // namespace mgpu::theory

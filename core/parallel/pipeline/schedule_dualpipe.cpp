// Bidirectional DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.2.1;
// github.com/deepseek-ai/DualPipe): the model in P parts and two copies of it, one per direction.
// Stage s holds part s of the "down" copy (chunk 0: micro-batches 0..M/2-1 enter at stage 0) and
// part P-1-s of the "up" copy (chunk 1: micro-batches M/2..M-1 enter at stage P-1). Both
// directions' forwards and backwards interleave, so each fills the other's bubble. Messages go to
// the neighbouring stage in the direction's own sense; after the step the two copies of each part
// (stages s and P-1-s) all-reduce their gradients (mirror_gradients.h) and stay identical.
#include <fmt/format.h>

#include <stdexcept>

#include "core/parallel/pipeline/schedule.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::pipeline {

// Seen from one stage, DualPipe is DualPipeV with P/2 stages and M/2 micro-batches per direction:
// stage s runs the order of DualPipeV's stage h = min(s, P-1-s) (DualPipe's "half rank"), whose
// chunk 0 is the direction that reaches the stage first, its chunk 1 the other. The V's turn at
// its tip becomes the message between the two middle stages, which run the same order mirrored,
// so the dependencies fall at the same times and the bubble is the V's: (PP/2-1)(F&B+B-3W).
Schedule dualpipe_schedule(int stages, int microbatches) {
  const int P = stages, M = microbatches;
  if (P < 2 || P % 2 != 0 || M % 2 != 0)
    throw std::invalid_argument(fmt::format(
        "dualpipe needs an even number of stages and micro-batches (got {} and {})", P, M));
  const Schedule half = dualpipev_schedule(P / 2, M / 2);
  std::vector<std::vector<Action>> compute(P);
  for (int s = 0; s < P; ++s) {
    const bool up_first = s >= P / 2;  // the up direction reaches the lower half second
    for (Action a : half.compute_actions(std::min(s, P - 1 - s))) {
      if (up_first) a.chunk = 1 - a.chunk;
      if (a.chunk == 1) a.microbatch += M / 2;
      compute[s].push_back(a);
    }
  }
  return with_communication(theory::schedule_name(theory::ScheduleKind::dualpipe), P, M, 2,
                            std::move(compute), Placement::bidirectional);
}

}  // namespace mgpu::pipeline

// The planner's screen formulas of the pipeline (see pipeline_bubbles.h).
#include "core/theory/pipeline_bubbles.h"

#include <algorithm>

namespace mgpu::theory {

double bubble_in_microbatches(const std::string& schedule, int pp, int virtual_stages) {
  const ChunkCosts stage{1, 2, 1}, chunk{0.5, 1, 0.5};
  return schedule == "interleaved" ? (pp - 1.0) / virtual_stages
         : schedule == "zb-h1"     ? bubble_zb1p(pp, stage) / 3
         : schedule == "zbv"       ? bubble_zbv(pp, chunk) / 3
         : schedule == "dualpipev" ? bubble_dualpipe(2 * pp, chunk) / 3
         : schedule == "dualpipe"  ? bubble_dualpipe(pp, stage) / 3
                                   : pp - 1.0;
}

double microbatches_in_flight(const std::string& schedule, int pp, int virtual_stages,
                              int microbatches) {
  return schedule == "gpipe" ? microbatches
         : schedule == "interleaved"
             ? std::min<double>(pp + (pp - 1.0) / virtual_stages, microbatches)
         : schedule == "zb-h1"     ? std::min(2 * pp - 1, microbatches)
         : schedule == "zbv"       ? peak_chunks_1f1b(2 * pp) / 2.0
         : schedule == "dualpipev" ? peak_chunks_dualpipe(2 * pp) / 2.0
         : schedule == "dualpipe"  ? peak_chunks_dualpipe(pp)
                                   : std::min(pp, microbatches);
}

}  // namespace mgpu::theory

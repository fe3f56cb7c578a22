// The ZeRO / FSDP lesson's runs, callable from tests.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/parallel/zero.h"
#include "core/runtime/allocator.h"
#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct ZeroRunResult {
  std::vector<float> losses;           // one per step run
  int64_t params = 0;                  // Psi: the full model's parameter count
  int param_bytes = 4;                 // bytes per parameter in the model (4 fp32, 2 bf16)
  std::vector<CategoryBytes> peak;     // per rank, peaks by category from after set-up
  std::vector<CategoryBytes> settled;  // per rank, current by category after the last step
  std::vector<int64_t> owned;          // per rank, parameter elements its optimizer updates
  int64_t largest_unit = 0;            // elements of the largest unit (a block, or the embedding)
  trace::Trace trace;
  bool checkpoint_written = false;
  int first_step = 0;
  bool fresh_optimizer = false;    // resumed from a parameters-only checkpoint
  std::vector<int> skipped_steps;  // fp16: the steps every rank skipped on inf/NaN gradients
  float loss_scale = 0;            // fp16: the scale after the last step (0: no loss scaling)
};

// Trains --ranks data-parallel ranks at `options.stage`. Throws UsageError for impossible
// configurations (a global batch that does not divide by the ranks).
ZeroRunResult train_zero(const CommonOptions& c, const parallel::ZeroOptions& options,
                         std::ostream& out);
std::unique_ptr<Lesson> make_zero_lesson();
// --paper: every stage of the ZeRO paper's 7.5B model on `c.ranks` phantom GPUs (lessons/
// zero_paper.cpp), measured beside the paper's formula.
int print_zero_paper_figure(const CommonOptions& c, std::ostream& out);

}  // namespace mgpu::lessons

// The hybrid lesson's report (lessons/hybrid.cpp runs the mesh): who is who on the mesh, each
// group's bytes measured beside core/theory's formulas, the pipeline bubble beside the
// schedule's, and memory per rank beside the model states by formula.
#pragma once
#include <algorithm>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/parallel/mesh.h"
#include "core/runtime/allocator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/profile.h"
#include "core/runtime/trace_event.h"
#include "core/theory/model_states.h"
#include "core/theory/schedule_kind.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct HybridLessonOptions {
  int dp = 0;  // 0: whatever --ranks leaves after tp and pp
  int tp = 2, pp = 2;
  std::string schedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b);
  int microbatches = 4;
  int zero = 0;            // 1-3: ZeRO-1/2/3 over dp
  int virtual_stages = 1;  // interleaved: chunks per stage
  int cp = 1;              // context parallelism inside each stage (ring attention, zigzag)
  bool sp = false;         // Megatron-SP in the blocks (tp > 1)
  bool vocab_parallel_head = false;  // lm_head split over the vocabulary (tp > 1)
  std::string tp_sums = "fp32";      // fp32 | activations: where TP's partial results are summed
  int ep = 1;                        // expert parallelism (a model with experts), carved out of dp
};

// The run as the lesson prints it: the mesh, the model, and what every rank measured.
struct HybridRun {
  const CommonOptions& c;
  const HybridLessonOptions& h;
  GPTConfig cfg;
  parallel::MeshShape mesh;
  int micro_b = 0;                       // sequences per micro-batch
  std::vector<train::RankReport> ranks;  // every rank's, its stage figures with them
  trace::Trace trace;
  int step = 0;  // the step the tables measure (the last one)

  // bf16/fp16: 2 B weights beside fp32 gradients and fp32 masters (theory::model_state_bytes).
  theory::StateBytes state_bytes() const {
    return theory::model_state_bytes(int(dtype_size(cfg.dtype)), c.optimizer);
  }
};

// "dp1 pp0 tp1" (and " cp1" when the mesh has a cp axis): who rank r is on the mesh.
std::string coord_label(const parallel::MeshShape& shape, int r);
// MoE blocks among pipeline stage s's layers (0 for a dense model).
int64_t moe_blocks_of_stage(const GPTConfig& cfg, int stages, int s);
// "GPU 5  dp1 pp0 tp1" for every rank, then each axis's groups by their members, marking the
// groups that cross nodes of the profile.
void print_mesh(std::ostream& out, const parallel::MeshShape& shape,
                const HardwareProfile& profile);
// Bytes each GPU sent in the step, by group, measured from the trace beside the formulas.
void print_traffic(std::ostream& out, const HybridRun& run);
// The bubble per GPU (exercise 04's accounting) beside the schedule's formula.
void print_bubbles(std::ostream& out, const HybridRun& run);
// Peak memory per GPU by category, then the model states per stage by formula.
void print_memory(std::ostream& out, const HybridRun& run);

}  // namespace mgpu::lessons

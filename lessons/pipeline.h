// The pipeline lessons (naive model parallel and pipeline schedules), callable from tests.
#pragma once
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel/pipeline/executor.h"
#include "core/runtime/trace_event.h"
#include "core/theory/schedule_kind.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct PipelineOptions {
  // Any schedule of the registry (core/theory/schedule_kind.h), by name.
  std::string schedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b);
  int stages = 0;  // 0 = --ranks
  int microbatches = 8;
  int virtual_stages = 1;
  // Theory mode (see core/parallel/pipeline/executor.h): free kernels, a fixed modeled time per
  // F and B, so every stage costs the same and bubbles match the formulas exactly.
  bool theory = false;
};

struct PipelineResult {
  std::vector<float> losses;                         // one per step (from the last stage)
  std::map<std::string, std::vector<float>> params;  // every stage's parameters, by name
  std::vector<pipeline::StageStepStats> last_step;   // per stage
  std::vector<double> measured_bubble;               // per rank, last step
  double measured_step_seconds = 0;                  // the last step's window in the trace
  int64_t model_params = 0;                          // the whole model's parameter count
  std::vector<int64_t> param_elements;               // per stage: the parameters it holds
  std::vector<int64_t> param_bytes;                  // per stage: the allocator's parameter bytes
  double theory_bubble = 0;
  std::vector<int> expected_peak;  // peak_activations_theory, per stage
  // Tied across stages: the embedding group's all-reduce bytes by theory::embedding_group_bytes
  // (0: no embedding group), and the model's vocab x dim the formula reads.
  int64_t embedding_group_bytes = 0;
  int vocab = 0, dim = 0;
  trace::Trace trace;
};

// Validates the configuration (throws UsageError with validate_pipeline_config's one line), then
// trains c.steps steps of the schedule, narrating to `out` unless c.quiet.
PipelineResult train_pipeline(const CommonOptions& c, const PipelineOptions& p, std::ostream& out);

// DualPipe's README table at the run's P beside what the run measured (pipeline_table.cpp).
void print_dualpipe_table(std::ostream& out, const std::string& schedule, const PipelineResult& r);

std::unique_ptr<Lesson> make_model_parallel_lesson();
std::unique_ptr<Lesson> make_pipeline_lesson();

}  // namespace mgpu::lessons

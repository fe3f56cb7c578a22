// What the planner's engine files share (simulate.cpp, layout_options.cpp, predict.cpp): the
// layout as the engine's options, and what each simulated rank reports for the prediction.
#pragma once
#include <utility>
#include <vector>

#include "core/parallel/hybrid.h"
#include "core/plan/simulate.h"
#include "core/runtime/allocator.h"
#include "core/trace/analysis.h"
#include "core/train/trainer.h"

namespace mgpu::plan::detail {

// ------------------------------------------------------------------------ the layout (options)

// The workload's model with the layout's precision and recompute mode.
GPTConfig model_for(const Workload& workload, const Layout& layout);
// The hybrid layout's options for `layout`; std::invalid_argument (one line) when it cannot run.
parallel::HybridOptions hybrid_options(const GPTConfig& cfg, const Workload& workload,
                                       const Layout& layout);
train::OptimizerFactory optimizer_factory(const Workload& workload, DType precision);

// ---------------------------------------------------------------------------- measuring (predict)

// What each thread reports after training: its allocator peaks and its pipeline stage.
struct RankMemory {
  MemoryStats stats;
  int stage = 0;
};

// The measured step, from each rank's own events (trace/analysis.h's definitions): the window
// spans every rank's step-lane event of that step; a rank's bubble is the share of the window its
// compute lane is idle, its exposed communication the comm-lane time not under compute. No trace
// is kept: each rank's tracer streams its events into a summary (the union of its compute and
// comm lanes, and its step spans), which gives the trace's figures exactly in a few spans, where
// GPT-3 175B's trace on 1024 GPUs would hold a gigabyte.
struct StepTimeline {
  trace::Interval window;
  double busiest_bubble_fraction = 0;  // on the rank with the most compute in the window
  double worst_exposed_comm = 0;
};

struct RankSummary {
  trace::IntervalUnion compute, comm;
  std::vector<std::pair<int, trace::Interval>> steps;  // (step, its span) per step-lane event

  void add(const trace::Event& e) {
    if (e.lane == trace::Lane::step) steps.emplace_back(e.step, trace::Interval{e.start, e.end()});
    if (e.lane == trace::Lane::compute) compute.add({e.start, e.end()});
    if (e.lane == trace::Lane::comm) comm.add({e.start, e.end()});
  }
};

StepTimeline measure_step(const std::vector<RankSummary>& ranks, int step);

// The prediction of the measured step (predict.cpp).
Prediction predict(const StepTimeline& timeline, const std::vector<RankMemory>& memory,
                   const GPTConfig& cfg, const Layout& layout, const HardwareProfile& profile);

}  // namespace mgpu::plan::detail

// Timing a schedule on paper, before it runs: each stage executes its actions in order, compute
// takes the cost model's time, a send is free for the sender and its message arrives p2p_time
// later, a recv waits for its message. From the timeline come the makespan and the bubble (the
// fraction of the step a stage sits idle), which the closed-form theory below must match.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/parallel/pipeline/schedule.h"

namespace mgpu::pipeline {

struct CostModel {
  std::function<double(int stage, int chunk)> forward_time = [](int, int) { return 1.0; };
  std::function<double(int stage, int chunk)> backward_time = [](int, int) { return 2.0; };
  std::function<double(int stage, int chunk)> backward_input_time = [](int, int) { return 1.0; };
  std::function<double(int stage, int chunk)> backward_weight_time = [](int, int) { return 1.0; };
  std::function<double(int from_stage, int to_stage)> p2p_time = [](int, int) { return 0.0; };

  // Same cost on every stage and chunk; the full backward costs backward_input + backward_weight.
  static CostModel uniform(double forward, double backward_input, double backward_weight,
                           double p2p = 0.0);
  double compute_time(int stage, const Action& action) const;
};

struct TimedAction {
  double start = 0, end = 0;
  Action action;
};

struct SimulationResult {
  std::vector<std::vector<TimedAction>> timeline;  // per stage, compute actions only
  double makespan = 0;
  std::vector<double> busy_time;      // per stage
  std::vector<double> idle_fraction;  // per stage: 1 - busy / makespan
  double bubble_fraction = 0;         // over all stages: 1 - sum(busy) / (P * makespan)
};

// Throws ScheduleError if the schedule deadlocks.
SimulationResult simulate_schedule(const Schedule& schedule, const CostModel& costs = {});

// Closed-form bubble fraction (see simulate.cpp for the derivations and their assumptions).
double bubble_fraction_theory(const std::string& schedule_name, int stages, int microbatches,
                              int virtual_stages = 1);
// The same formula as text with its numbers: "(P-1)/(M+P-1) = 3/7".
std::string bubble_formula(const std::string& schedule_name, int stages, int microbatches,
                           int virtual_stages = 1);

// Peak in-flight activations per stage, counted in (micro-batch, chunk) units: forwards done minus
// backwards done (B, or B-input for zero bubble). With V chunks one unit is 1/V of a stage.
std::vector<int> peak_activations_theory(const std::string& schedule_name, int stages,
                                         int microbatches, int virtual_stages = 1);
std::vector<int> peak_inflight_microbatches(const Schedule& schedule);

// One row per stage, one cell per time unit of the simulated timeline:
//   stage 0 | F0 F1 F2 F3 .. .. .. B0 bb F4 ...
// ".." is idle; the action's letter in lower case ("bb") continues the action to its left (a
// backward costs 2 by default), as the trace's ASCII timeline fills an event.
std::string render_schedule(const Schedule& schedule, const CostModel& costs = {});

}  // namespace mgpu::pipeline

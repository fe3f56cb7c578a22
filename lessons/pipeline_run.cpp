// The pipeline lessons' run: the options checked, the schedule and the split narrated, then
// one rank per stage trains; every stage reports its stash statistics (RankReport's stage
// figures) and the run returns the trained model's parameters.
#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/hybrid.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/exercise_views.h"
#include "lessons/pipeline.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

std::string explain(const std::string& schedule) {
  switch (theory::schedule_kind(schedule)) {
    case theory::ScheduleKind::naive:
      return "naive model parallel: the whole batch goes down the stages and back, one stage at a "
             "time; the others wait";
    case theory::ScheduleKind::gpipe:
      return "GPipe: every stage runs all M forwards, then all M backwards; the ramp up and down "
             "leaves P-1 idle slots per stage, and each stage holds all M micro-batches' "
             "activations";
    case theory::ScheduleKind::one_f_one_b:
      return "1F1B: P-s-1 warmup forwards, then one forward / one backward, then the drain; the "
             "same bubble as GPipe, but stage s holds at most P-s micro-batches' activations";
    case theory::ScheduleKind::interleaved:
      return "interleaved 1F1B: each stage holds V model chunks, so a micro-batch visits every "
             "stage V times; the ramp is V times shorter (more messages, same work)";
    case theory::ScheduleKind::zbv:
      return "ZB-V: two chunks per stage in a V (stage 0 holds the first and the last layers), the "
             "backward split into B and W; W's fill the gaps, every stage holds 1F1B's stage-0 "
             "activations";
    case theory::ScheduleKind::dualpipe:
      return "DualPipe: two copies of the model, half of the micro-batches going down the stages "
             "and half going up; each direction's work fills the other's bubble, and the two "
             "copies of each stage all-reduce their gradients after the step";
    case theory::ScheduleKind::dualpipev:
      return "DualPipeV: DualPipe cut in half into a V; in the steady state each stage runs a "
             "forward and a backward of two micro-batches as one pair (F&B), the tail splits B and "
             "W";
    case theory::ScheduleKind::zb_h1:
      return "ZB-H1: the backward is split into B (input gradient: the previous stage waits for "
             "it) "
             "and W (weight gradient: nobody waits); the deferred W's fill the drain bubble";
  }
  return "";
}

// The plan as the simulator times it, in units of one chunk forward (backward = 2 units).
void print_plan(std::ostream& out, const pipeline::Schedule& schedule) {
  // ZB-H1's B and W take one cell each; everywhere else the full backward takes two.
  const bool zero_bubble = theory::traits(theory::schedule_kind(schedule.name)).splits_backward;
  const pipeline::CostModel costs =
      zero_bubble ? pipeline::CostModel::uniform(1, 1, 1) : pipeline::CostModel{};
  fmt::print(out, "\nthe plan (simulated: F = 1 cell, B = 2 cells as in B0 bb{}, '..' = idle):\n{}",
             zero_bubble ? " (B-input 1 + W 1)" : "", pipeline::render_schedule(schedule, costs));
}

// The number of stages, once the options are known to make a pipeline (else a UsageError).
int checked_stages(const CommonOptions& c, const PipelineOptions& p) {
  const int P = p.stages > 0 ? p.stages : c.ranks;
  if (launched_by_mpi() && P != c.ranks)
    throw UsageError(
        fmt::format("--stages {} but mpirun started {} processes (one per stage): "
                    "use mpirun -n {}",
                    P, c.ranks, P));
  try {
    pipeline::validate_pipeline_config(p.schedule, P, p.microbatches, p.virtual_stages, c.layers);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (c.batch % p.microbatches != 0)
    throw UsageError(fmt::format("batch {} does not split into {} micro-batches: use --batch {}",
                                 c.batch, p.microbatches,
                                 std::max(1, c.batch / p.microbatches) * p.microbatches));
  return P;
}

// What the run is: the schedule's idea, the model, how it is split and fed, the device, the plan.
void print_setup(std::ostream& out, const CommonOptions& c, const PipelineOptions& p,
                 const GPTConfig& cfg, const pipeline::Schedule& schedule,
                 const WorldOptions& wopt) {
  const int P = schedule.stages, V = schedule.virtual_stages;
  const int parts = schedule.num_virtual_stages();
  const pipeline::LayerPartition partition = pipeline::partition_layers(c.layers, parts);
  fmt::print(out, "{}.\n\n", explain(p.schedule));
  fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
  if (schedule.placement == pipeline::Placement::bidirectional)
    fmt::print(out,
               "split:  {} stage(s) x 2 copies: {}; stage s holds stage s of the down copy and "
               "stage {}-s of the up copy; stages 0 and {} both embed and compute the loss\n",
               P, partition.description, P - 1, P - 1);
  else
    fmt::print(out,
               "split:  {} stage(s) x {} chunk(s): {}{}; stage 0 also embeds, stage {} "
               "computes the loss\n",
               P, V, V > 1 ? "virtual " : "", partition.description, schedule.stage_of(parts - 1));
  fmt::print(out, "data:   batch {} = {} micro-batch(es) of {} sequence(s) x {} tokens\n", c.batch,
             p.microbatches, c.batch / p.microbatches, c.seq);
  fmt::print(out, "device: {}{}\n", describe_world(wopt),
             p.theory ? "; THEORY MODE: every F costs 1 ms and every B 2 ms per stage, kernels "
                        "free, so all stages are equal"
                      : "");
  print_plan(out, schedule);
}

}  // namespace

// Every stage's stash statistics and parameters from its report (under mpirun the stages are
// other processes).
void read_stage_reports(const std::vector<train::RankReport>& ranks, PipelineResult& result) {
  for (const train::RankReport& rank : ranks) {
    const train::StageFigures& st = rank.stage.value();
    result.last_step.push_back({0, st.peak_stashed, st.stash_bytes, st.peak_activation_bytes});
    result.param_bytes.push_back(rank.memory.current[static_cast<int>(MemCategory::parameters)]);
    result.param_elements.push_back(rank.params_held);
  }
}

PipelineResult train_pipeline(const CommonOptions& c, const PipelineOptions& p, std::ostream& out) {
  const int P = checked_stages(c, p);
  CommonOptions common = c;
  common.ranks = P;
  std::shared_ptr<const data::Task> task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  nlohmann::json config = c.to_json();
  config["schedule"] = p.schedule;
  config["stages"] = P;
  config["microbatches"] = p.microbatches;
  config["theory_mode"] = p.theory;
  const pipeline::Schedule schedule = pipeline::make_schedule(
      p.schedule, P, p.microbatches, p.virtual_stages, ex::selected_seams().pipeline);
  const int V = schedule.virtual_stages;  // 2 for the V schedules whatever --virtual-stages says
  config["virtual_stages"] = V;
  run::RunSpec spec = run_spec(common, task, cfg, c.batch, config);
  run::Hybrid mesh{.options = {.schedule = p.schedule,
                               .microbatches = p.microbatches,
                               .virtual_stages = p.virtual_stages},
                   .seams = ex::selected_seams().hybrid(),
                   .pipeline = true};
  if (p.theory) {
    const FaultPlan faults = spec.world.profile.faults;  // injected faults still apply
    spec.world.profile = HardwareProfile::ideal(0);
    spec.world.profile.faults = faults;
    mesh.options.theory = pipeline::TheoryCosts{1e-3, 2e-3};  // 1 ms F, 2 ms B per stage
  }
  spec.parallelism = mesh;
  run::validate(spec);

  PipelineResult result;
  result.model_params = count_params(cfg);
  result.theory_bubble = pipeline::bubble_fraction_theory(p.schedule, P, p.microbatches, V);
  result.expected_peak = pipeline::peak_activations_theory(p.schedule, P, p.microbatches, V);
  if (cfg.tie_embeddings && schedule.stage_of(P * V - 1) != 0)  // the head off stage 0
    result.embedding_group_bytes = theory::embedding_group_bytes(cfg);
  result.vocab = cfg.vocab;
  result.dim = cfg.dim;
  if (!c.quiet) print_setup(out, c, p, cfg, schedule, spec.world);
  if (!c.quiet) fmt::print(out, "\ntraining {} steps:\n", c.steps);
  spec.train.report_ranks = true;
  spec.train.keep_params = true;
  spec.trace_meta = {
      {"lesson", theory::schedule_kind(p.schedule) == theory::ScheduleKind::naive ? "model_parallel"
                                                                                  : "pipeline"},
      {"config", config},
      {"predictions", {{"bubble_fraction", result.theory_bubble}}}};
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  result.losses = ran.trained.losses;
  print_checkpoint_lines(out, c, ran.trained);
  read_stage_reports(ran.trained.ranks, result);
  for (CheckpointTensor& t : ran.trained.params) result.params[t.name] = std::move(t.values);
  result.trace = std::move(ran.trace);
  if (!ran.root) return result;  // under mpirun the merged trace is on rank 0's process
  // Measured by exercise 04's bubble accounting: the student's own with --impl mine.
  result.measured_bubble = measured_bubble_fractions(result.trace, c.steps - 1);
  const trace::Interval window = trace::analysis_window(result.trace, c.steps - 1);
  result.measured_step_seconds = window.end - window.begin;
  return result;
}

}  // namespace mgpu::lessons

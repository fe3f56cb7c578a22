// Lesson 6 — pipeline parallelism. Each rank is one stage: a contiguous slice of the model's
// blocks. The batch is cut into M micro-batches that flow down the stages (activations, sent
// point-to-point) and back up (gradients). A schedule says in which order each stage runs its
// forwards and backwards; the idle gaps it leaves are the "bubbles" this lesson measures against
// the formulas: (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(VM+P-1) interleaved.
#include "lessons/pipeline.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/parallel/pipeline/layout.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/exercise_views.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

std::string explain(const std::string& schedule) {
  if (schedule == "naive")
    return "naive model parallel: the whole batch goes down the stages and back, one stage at a "
           "time; the others wait";
  if (schedule == "gpipe")
    return "GPipe: every stage runs all M forwards, then all M backwards; the ramp up and down "
           "leaves P-1 idle slots per stage, and each stage holds all M micro-batches' activations";
  if (schedule == "1f1b")
    return "1F1B: P-s-1 warmup forwards, then one forward / one backward, then the drain; the "
           "same bubble as GPipe, but stage s holds at most P-s micro-batches' activations";
  if (schedule == "interleaved")
    return "interleaved 1F1B: each stage holds V model chunks, so a micro-batch visits every "
           "stage V times; the ramp is V times shorter (more messages, same work)";
  if (schedule == "zbv")
    return "ZB-V: two chunks per stage in a V (stage 0 holds the first and the last layers), the "
           "backward split into B and W; W's fill the gaps, every stage holds 1F1B's stage-0 "
           "activations";
  if (schedule == "dualpipe")
    return "DualPipe: two copies of the model, half of the micro-batches going down the stages "
           "and half going up; each direction's work fills the other's bubble, and the two "
           "copies of each stage all-reduce their gradients after the step";
  if (schedule == "dualpipev")
    return "DualPipeV: DualPipe cut in half into a V; in the steady state each stage runs a "
           "forward and a backward of two micro-batches as one pair (F&B), the tail splits B and W";
  return "ZB-H1: the backward is split into B (input gradient: the previous stage waits for it) "
         "and W (weight gradient: nobody waits); the deferred W's fill the drain bubble";
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

// The plan as the simulator times it, in units of one chunk forward (backward = 2 units).
void print_plan(std::ostream& out, const pipeline::Schedule& schedule) {
  // ZB-H1's B and W take one cell each; everywhere else the full backward takes two.
  const bool zero_bubble = schedule.name == "zb-h1" || schedule.name == "zbv" ||
                           schedule.name == "dualpipev" || schedule.name == "dualpipe";
  const pipeline::CostModel costs =
      zero_bubble ? pipeline::CostModel::uniform(1, 1, 1) : pipeline::CostModel{};
  fmt::print(out, "\nthe plan (simulated: F = 1 cell, B = 2 cells{}, '..' = idle):\n{}",
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

// After the last step: every stage's stash statistics to rank 0 (under mpirun the stages are
// other processes), and the parameters (for the single-device comparison).
void collect_last_step(RankContext& ctx, train::Layout& layout, std::mutex& mutex,
                       PipelineResult& result) {
  const int P = static_cast<int>(result.last_step.size());
  auto& stage = static_cast<pipeline::PipelineLayout&>(layout);
  const pipeline::StageStepStats& st = stage.last_stats();
  const int64_t param_bytes =
      ctx.allocator.stats().current[static_cast<int>(MemCategory::parameters)];
  int64_t param_elements = 0;
  for (const Param* param : stage.stage().params()) param_elements += param->data.numel();
  std::vector<std::vector<int64_t>> all = train::gather_to_root(
      ctx,
      {st.peak_stashed, st.stash_bytes, st.peak_activation_bytes, param_bytes, param_elements});
  std::lock_guard lock(mutex);
  if (ctx.rank == 0)
    for (int r = 0; r < P; ++r) {
      result.last_step[r] = {0, static_cast<int>(all[r][0]), all[r][1], all[r][2]};
      result.param_bytes[r] = all[r][3];
      result.param_elements[r] = all[r][4];
    }
  if (ctx.device.has_data())  // phantom runs have shapes and times, no values to compare
    for (Param* param : stage.stage().params())
      result.params[param->name] = param->data.to_vector();
}

}  // namespace

PipelineResult train_pipeline(const CommonOptions& c, const PipelineOptions& p, std::ostream& out) {
  const int P = checked_stages(c, p);
  CommonOptions common = c;
  common.ranks = P;
  WorldOptions wopt = common.world_options();
  pipeline::ExecutorOptions exec;
  if (p.theory) {
    wopt.profile = HardwareProfile::ideal(0);
    exec.theory = pipeline::TheoryCosts{1e-3, 2e-3};  // 1 ms forward, 2 ms backward per stage
  }
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  const pipeline::Schedule schedule = pipeline::make_schedule(
      p.schedule, P, p.microbatches, p.virtual_stages, ex::selected_seams().pipeline);
  const int V = schedule.virtual_stages;  // 2 for the V schedules whatever --virtual-stages says
  if (schedule.splits_backward())
    refuse_experts(cfg, "--schedule " + p.schedule,
                   "zero-bubble's split backward has no MoE half; use --schedule 1f1b");

  PipelineResult result;
  result.model_params = count_params(cfg);
  result.theory_bubble = pipeline::bubble_fraction_theory(p.schedule, P, p.microbatches, V);
  result.expected_peak = pipeline::peak_activations_theory(p.schedule, P, p.microbatches, V);
  if (cfg.tie_embeddings && schedule.stage_of(P * V - 1) != 0)  // the head off stage 0
    result.embedding_group_bytes = theory::embedding_group_bytes(cfg);
  result.vocab = cfg.vocab;
  result.dim = cfg.dim;
  if (!c.quiet) print_setup(out, c, p, cfg, schedule, wopt);
  World world(wopt);
  std::mutex mutex;
  result.last_step.resize(P);
  result.param_bytes.resize(P);
  result.param_elements.resize(P);
  if (!c.quiet) fmt::print(out, "\ntraining {} steps:\n", c.steps);
  nlohmann::json config = c.to_json();
  config["schedule"] = p.schedule;
  config["stages"] = P;
  config["microbatches"] = p.microbatches;
  config["virtual_stages"] = V;
  config["theory_mode"] = p.theory;
  LossLog log(c, out);
  train::TrainResult trained = train::train(
      world, *task, train_options(c, c.batch, cfg, config),
      [&](RankContext& ctx) {
        return std::make_unique<pipeline::PipelineLayout>(cfg, *ctx.comm, schedule, V,
                                                          optimizer_factory(c), exec);
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout& layout) {
        collect_last_step(ctx, layout, mutex, result);
      });
  result.losses = trained.losses;
  print_checkpoint_lines(out, c, trained);

  nlohmann::json meta = {{"lesson", p.schedule == "naive" ? "model_parallel" : "pipeline"},
                         {"config", config},
                         {"predictions", {{"bubble_fraction", result.theory_bubble}}}};
  result.trace = world.collect_trace(meta);
  if (!world.is_root()) return result;  // under mpirun the merged trace is on rank 0's process
  // Measured by exercise 04's bubble accounting: the student's own with --impl mine.
  result.measured_bubble = measured_bubble_fractions(result.trace, c.steps - 1);
  const trace::Interval window = trace::analysis_window(result.trace, c.steps - 1);
  result.measured_step_seconds = window.end - window.begin;
  return result;
}

namespace {

// Tied embeddings: the embedding group's all-reduce of the last step (each member's last), as
// the trace has it, beside its bytes by the formula.
void print_embedding_group(std::ostream& out, const CommonOptions& c, const PipelineResult& r) {
  if (r.embedding_group_bytes == 0) return;
  std::map<int, const trace::Event*> last;  // rank -> its last all-reduce in the group
  for (const trace::Event& e : r.trace.events)
    if (e.group == "embedding" && e.op == "all_reduce" &&
        (!last.count(e.rank) || last[e.rank]->start < e.start))
      last[e.rank] = &e;
  fmt::print(out, "\nembedding group (tied wte: the first and the last stage), step {}:\n",
             c.steps);
  for (const auto& [rank, e] : last)
    fmt::print(
        out, "  rank {}  all_reduce of the wte gradient: {:>10}  (vocab {} x dim {} x 4 B = {})\n",
        rank, format_bytes(e->bytes), r.vocab, r.dim, format_bytes(r.embedding_group_bytes));
}

// The end-of-run report: bubble and memory, measured beside the theory, then the pictures.
void report(std::ostream& out, const CommonOptions& c, const PipelineOptions& p,
            const PipelineResult& r) {
  const int P = static_cast<int>(r.last_step.size());
  fmt::print(out, "\nbubble per rank, step {} (idle / step time), measured vs theory {}:\n",
             c.steps, pipeline::bubble_formula(p.schedule, P, p.microbatches, p.virtual_stages));
  fmt::print(out, "  (measured by {})\n", bubble_accounting_credit());
  for (int s = 0; s < P; ++s)
    fmt::print(out, "  rank {}  bubble measured {:>6}  theory {:>6}\n", s,
               percent(r.measured_bubble[s]), percent(r.theory_bubble));
  if (!p.theory)
    fmt::print(out,
               "  (the formula assumes equal stages; here stage 0 also embeds and stage {} "
               "computes the loss, and messages take time: add --theory for equal stages)\n",
               P - 1);
  fmt::print(out,
             "\npeak activations per rank: (micro-batch, chunk) sets held at once x the "
             "largest set:\n");
  for (int s = 0; s < P; ++s) {
    const auto& st = r.last_step[s];
    fmt::print(
        out, "  rank {}  held {:>2} (expected {:>2})  x {:>10} = {:>10}  (allocator peak {})\n", s,
        st.peak_stashed, r.expected_peak[s], format_bytes(st.stash_bytes),
        format_bytes(st.peak_stashed * st.stash_bytes), format_bytes(st.peak_activation_bytes));
  }
  if (p.schedule == "zb-h1")
    fmt::print(out,
               "  (the allocator holds more: W still needs the Linear inputs and the gradients "
               "B kept, until W runs, s micro-batches after B on stage s)\n");
  print_embedding_group(out, c, r);
}

class PipelineLesson : public Lesson {
 public:
  explicit PipelineLesson(bool naive) : naive_(naive) {
    if (naive_) {
      options_.schedule = "naive";
      options_.microbatches = 1;
    }
  }
  std::string name() const override { return naive_ ? "model_parallel" : "pipeline"; }
  std::string summary() const override {
    return naive_ ? "split the layers over GPUs: it fits, but only one GPU works at a time"
                  : "micro-batches fill the pipeline: GPipe, 1F1B, interleaved, ZB-H1, ZB-V, "
                    "DualPipe(V); bubbles vs theory";
  }
  LessonDefaults defaults() const override {
    return {.ranks = 4, .steps = 20, .batch = 16, .layers = 8};
  }
  void add_options(CLI::App& app) override {
    if (!naive_) {
      app.add_option("--schedule", options_.schedule,
                     "gpipe | 1f1b | interleaved | zb-h1 | zbv | dualpipev | dualpipe")
          ->capture_default_str();
      app.add_option("--microbatches", options_.microbatches, "micro-batches per batch (M)")
          ->capture_default_str();
      app.add_option("--virtual-stages", options_.virtual_stages,
                     "model chunks per stage (V, interleaved only)")
          ->capture_default_str();
    }
    app.add_option("--stages", options_.stages, "pipeline stages P (default: --ranks)")
        ->check(AtLeastOne("stage"));
    ranks_option_ = app.get_option("--ranks");
    app.add_flag("--theory", options_.theory,
                 "theory mode: fixed 1 ms per F and 2 ms per B, equal stages, exact formulas");
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    const int P = options_.stages > 0 ? options_.stages : c.ranks;
    if (options_.stages > 0 && ranks_option_ && ranks_option_->count() > 0 && c.ranks != P)
      throw UsageError(
          fmt::format("the pipeline runs one rank per stage: --stages {} needs --ranks {} (or "
                      "leave --ranks out)",
                      P, P));
    fmt::print(out, "== {}: {} over {} stages, {} micro-batch(es) ==\n", name(), options_.schedule,
               P, options_.microbatches);
    PipelineResult r = train_pipeline(c, options_, out);
    if (!root_process()) return 0;  // under mpirun rank 0's process reports
    report(out, c, options_, r);
    const std::string& s = options_.schedule;
    // The V schedules and DualPipe are where its table is news; 1F1B and ZB-H1 have rows in it.
    if (options_.theory && !r.params.empty() && (s == "zbv" || s == "dualpipev" || s == "dualpipe"))
      print_dualpipe_table(out, options_.schedule, r);
    return finish_run(c, r.trace, name(), out);
  }

 private:
  bool naive_;
  PipelineOptions options_;
  const CLI::Option* ranks_option_ = nullptr;  // to tell "--ranks 4" from the default 4
};

}  // namespace

std::unique_ptr<Lesson> make_model_parallel_lesson() {
  return std::make_unique<PipelineLesson>(true);
}
std::unique_ptr<Lesson> make_pipeline_lesson() {
  return std::make_unique<PipelineLesson>(false);
}

}  // namespace mgpu::lessons

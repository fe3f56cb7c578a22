// Lesson 16 — hybrid DP x TP x PP ("3D parallelism"). The ranks form a mesh: tensor-parallel
// groups (tp, neighbours: one node's fast links) split every block; pipeline stages (pp) split
// the layers and pass activations point to point; data-parallel replicas (dp) of the whole
// pipeline split the batch and average gradients once per step (optionally ZeRO-1 over dp, and cp
// ranks splitting every sequence inside a stage). The lesson prints who is who on
// the mesh, then measures each group's traffic from the trace beside its formula, the pipeline
// bubble beside theory, and memory per rank by category.
#include "lessons/hybrid.h"

#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/hybrid.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/exercise_views.h"
#include "lessons/hybrid_report.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

parallel::HybridOptions hybrid_options(const CommonOptions& c, const HybridLessonOptions& h) {
  parallel::HybridOptions options{.schedule = h.schedule,
                                  .microbatches = h.microbatches,
                                  .virtual_stages = h.virtual_stages,
                                  .zero = h.zero};
  options.mesh.tp = h.tp;
  options.mesh.pp = h.pp;
  options.mesh.cp = h.cp;
  options.mesh.ep = h.ep;
  options.mesh.dp = h.dp > 0 ? h.dp : std::max(1, c.ranks / std::max(1, h.tp * h.pp * h.cp));
  options.sequence_parallel = h.sp;
  options.vocab_parallel_head = h.vocab_parallel_head;
  options.tp_sums = h.tp_sums == "activations" ? parallel::PartialSums::activation_dtype
                                               : parallel::PartialSums::fp32;
  return options;
}

nlohmann::json hybrid_config(const CommonOptions& c, const HybridLessonOptions& h,
                             const parallel::MeshShape& mesh) {
  nlohmann::json config = c.to_json();
  config["dp"] = mesh.dp;
  config["tp"] = mesh.tp;
  config["pp"] = mesh.pp;
  config["cp"] = mesh.cp;
  if (mesh.ep > 1) config["ep"] = mesh.ep;
  config["schedule"] = h.schedule;
  config["microbatches"] = h.microbatches;
  config["zero"] = h.zero;
  config["virtual_stages"] = h.virtual_stages;
  config["sp"] = h.sp;
  config["vocab_parallel_head"] = h.vocab_parallel_head;
  config["tp_sums"] = h.tp_sums;
  return config;
}

void print_setup(std::ostream& out, const HybridRun& run, const WorldOptions& wopt) {
  const CommonOptions& c = run.c;
  const parallel::MeshShape& mesh = run.mesh;
  fmt::print(out, "model:  {}\n", describe_model(run.cfg, count_params(run.cfg)));
  print_mesh(out, mesh, wopt.profile);
  fmt::print(out,
             "data:   batch {} = dp {} replicas x {} micro-batches x {} sequences of {} tokens{}\n",
             c.batch, mesh.dp, run.h.microbatches, run.micro_b, c.seq,
             mesh.cp > 1 ? fmt::format(", each split zigzag over cp {} ({} tokens per GPU)",
                                       mesh.cp, c.seq / mesh.cp)
                         : "");
  fmt::print(out, "device: {}\n\ntraining {} steps ({} schedule over {} stages):\n",
             describe_world(wopt), c.steps, run.h.schedule, mesh.pp);
}

// Trains the mesh; every rank's report comes back with the run. False on the other processes
// under mpirun (rank 0's process reports).
bool run_hybrid(const run::RunSpec& spec, HybridRun& run, std::ostream& out) {
  const CommonOptions& c = run.c;
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  print_checkpoint_lines(out, c, ran.trained);
  run.ranks = std::move(ran.trained.ranks);
  run.trace = std::move(ran.trace);
  if (!ran.root) return false;
  run.step = last_step(run.trace).value_or(0);
  return true;
}

int train_hybrid(const CommonOptions& c, const HybridLessonOptions& h, std::ostream& out) {
  std::shared_ptr<const data::Task> task = make_task(c);
  HybridRun run{.c = c, .h = h, .cfg = model_config(c, *task)};
  const parallel::HybridOptions options = hybrid_options(c, h);
  const nlohmann::json config = hybrid_config(c, h, options.mesh);
  run::RunSpec spec = run_spec(c, task, run.cfg, c.batch, config);
  spec.parallelism = run::Hybrid{.options = options, .seams = ex::selected_seams().hybrid()};
  spec.train.report_ranks = true;
  const int P = options.mesh.pp, M = h.microbatches, chunks = h.virtual_stages;
  spec.trace_meta = {
      {"lesson", "hybrid"},
      {"config", config},
      {"predictions",
       {{"bubble_fraction", pipeline::bubble_fraction_theory(h.schedule, P, M, chunks)}}}};
  try {
    run::validate(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  // In fp32 the activations' type is fp32: the option would change nothing.
  if (h.tp_sums == "activations" && run.cfg.dtype == DType::f32)
    throw UsageError(
        "--tp-sums activations sums in the activations' type, which under --precision fp32 is "
        "fp32 already: use it with --precision bf16 or fp16 (on --device phantom), or drop it");
  // The collectives reduce fp32 values only; on the phantom device (shapes, no values) a 2-byte
  // sum is priced as Megatron sends it.
  if (h.tp_sums == "activations" && c.device != "phantom")
    throw UsageError(
        fmt::format("--tp-sums activations with --precision {} needs 2-byte reductions, which the "
                    "collectives do not compute on values: use --device phantom, or --tp-sums fp32",
                    c.precision));
  run.mesh = options.mesh;
  run.micro_b = c.batch / (run.mesh.dp * h.microbatches);
  if (!c.quiet) print_setup(out, run, spec.world);
  if (!run_hybrid(spec, run, out)) return 0;
  print_traffic(out, run);
  print_bubbles(out, run);
  print_memory(out, run);
  fmt::print(out, "\n");
  return finish_run(c, run.trace, "hybrid", out);
}

class HybridLesson : public Lesson {
 public:
  std::string name() const override { return "hybrid"; }
  std::string summary() const override {
    return "DP x TP x PP on a device mesh: pipeline stages of tensor-parallel groups, replicated";
  }
  LessonDefaults defaults() const override {
    return {.ranks = 8, .steps = 20, .batch = 16, .layers = 4};
  }
  void add_options(CLI::App& app) override {
    app.add_option("--dp", options_.dp, "data-parallel replicas (default: ranks / (tp * pp))")
        ->check(AtLeastOne("rank"));
    app.add_option("--tp", options_.tp, "tensor-parallel ranks per stage")
        ->check(AtLeastOne("rank"))
        ->capture_default_str();
    app.add_option("--pp", options_.pp, "pipeline stages")
        ->check(AtLeastOne("stage"))
        ->capture_default_str();
    app.add_option("--schedule", options_.schedule,
                   "gpipe | 1f1b | interleaved | zb-h1 | zbv | dualpipev | dualpipe")
        ->capture_default_str();
    app.add_option("--virtual-stages", options_.virtual_stages,
                   "interleaved: layer chunks per stage (V); pp x V must divide the layers")
        ->check(AtLeastOne("layer chunk"))
        ->capture_default_str();
    app.add_option("--microbatches", options_.microbatches, "micro-batches per replica (M)")
        ->check(AtLeastOne("micro-batch"))
        ->capture_default_str();
    app.add_option("--cp", options_.cp,
                   "context-parallel ranks per stage: every sequence split zigzag over them, "
                   "ring attention (--seq must split into 2 x cp chunks)")
        ->check(AtLeastOne("rank"))
        ->capture_default_str();
    app.add_option("--ep", options_.ep,
                   "expert-parallel ranks (a model with --experts): each dp group's ranks split "
                   "every MoE block's experts ep ways; divides dp and the experts")
        ->check(AtLeastOne("rank"))
        ->capture_default_str();
    app.add_option("--zero", options_.zero,
                   "0: gradients all-reduced over dp | 1: ZeRO-1 over dp (each dp rank keeps "
                   "optimizer state and fp32 masters for 1/dp of its stage) | 2: + gradients | "
                   "3: + parameters (FSDP x TP x PP); with dp 1 a no-op")
        ->capture_default_str();
    app.add_flag("--sp", options_.sp,
                 "sequence parallelism (Megatron-SP) in the blocks: layernorms and residuals hold "
                 "T / tp tokens (needs --tp 2 or more)");
    app.add_flag("--vocab-parallel-head", options_.vocab_parallel_head,
                 "split lm_head over the vocabulary across the tp group, with the parallel "
                 "cross-entropy (needs --tp 2 or more, untied embeddings)");
    app.add_option("--tp-sums", options_.tp_sums,
                   "fp32: TP's partial results summed in fp32 (the single-device numbers) | "
                   "activations: in the activations' type, as Megatron-LM sends them")
        ->check(CLI::IsMember({"fp32", "activations"}))
        ->capture_default_str();
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== hybrid: dp x tp x pp{}{} over {} GPUs ==\n", options_.cp > 1 ? " x cp" : "",
               options_.ep > 1 ? " x ep" : "", c.ranks);
    return train_hybrid(c, options_, out);
  }

 private:
  HybridLessonOptions options_;
};

}  // namespace

std::unique_ptr<Lesson> make_hybrid_lesson() {
  return std::make_unique<HybridLesson>();
}

}  // namespace mgpu::lessons

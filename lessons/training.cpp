#include "lessons/training.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/optim/mixed_precision.h"
#include "core/runtime/cuda_emulation.h"
#include "core/theory/model_states.h"
#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline.h"
#include "core/trace/chrome_trace.h"
#include "core/train/single_device.h"
#include "exercises/selection.h"
#include "lessons/host_memory_check.h"
#include "lessons/viz_command.h"

namespace mgpu::lessons {

std::unique_ptr<data::Task> make_task(const CommonOptions& c) {
  data::TaskOptions opt;
  opt.seq_len = c.seq;
  std::string name = c.task;
  if (!c.data_file.empty()) {
    name = "text";
    opt.path = c.data_file;
  } else if (name == "text") {
    throw UsageError("--task text needs a file: add --data path/to/file.txt");
  }
  return data::make_task(name, c.seed, opt);
}

// The mixture-of-experts fields and the routing --impl selected (exercise 09).
void set_expert_config(GPTConfig& cfg, const CommonOptions& c) {
  // An option is honoured or refused: the experts' shape means nothing without experts.
  const std::pair<const char*, bool> shaped[] = {
      {"--top-k", c.top_k != 1},
      {"--moe-every", c.moe_every != 1},
      {"--capacity-factor", c.capacity_factor != "dropless"},
      {"--aux-loss-coef", c.aux_loss_coef != 0.01}};
  for (const auto& [option, set] : shaped)
    if (c.experts == 0 && set)
      throw UsageError(fmt::format(
          "{} shapes the experts of an MoE block, but the model has none: add --experts 4 (or "
          "leave {} out)",
          option, option));
  cfg.experts = c.experts;
  cfg.top_k = c.top_k;
  cfg.moe_every = c.moe_every;
  cfg.expert_hidden = c.expert_hidden;
  cfg.capacity_factor = c.capacity_factor == "dropless" ? 0.0 : std::stod(c.capacity_factor);
  // Checked as the double typed: a float cast would turn 1e39 into inf first.
  if (!(c.aux_loss_coef <= GPTConfig::kMaxAuxLossCoef))
    throw UsageError(fmt::format(
        "--aux-loss-coef {} is above {:g}: a larger weight drowns the language-model loss (the "
        "usual is 0.01)",
        c.aux_loss_coef, GPTConfig::kMaxAuxLossCoef));
  cfg.aux_loss_coef = static_cast<float>(c.aux_loss_coef);
  cfg.route = ex::selected_seams().moe.route;
  try {
    cfg.validate_experts();  // with the layers set: --moe-every above them is refused here
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

GPTConfig model_config(const CommonOptions& c, const data::Task& task) {
  GPTConfig cfg;
  cfg.vocab = task.vocab_size();
  if (c.vocab > 0 && task.name() == "text" && c.vocab != task.vocab_size())
    throw UsageError(
        fmt::format("--vocab {} does not match the text task's byte-level "
                    "vocabulary of {}: leave --vocab out",
                    c.vocab, task.vocab_size()));
  if (c.vocab > 0) {  // a larger vocabulary is fine (ids the task never uses); smaller is not
    if (c.vocab < task.vocab_size())
      throw UsageError(
          fmt::format("--vocab {} is too small for the {} task, whose tokens need {}: "
                      "use --vocab {} or more (or leave it out)",
                      c.vocab, task.name(), task.vocab_size(), task.vocab_size()));
    cfg.vocab = c.vocab;
  }
  cfg.seq_len = c.seq;
  cfg.layers = c.layers;
  cfg.dim = c.dim;
  cfg.heads = c.heads;
  cfg.tie_embeddings = c.tie_embeddings == "on";
  cfg.seed = c.seed;
  set_expert_config(cfg, c);
  try {
    cfg.dtype = parse_precision(c.precision);
    cfg.recompute = parse_recompute(c.recompute);
  } catch (const UsageError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  cfg.validate();                    // std::invalid_argument -> exit 2 with its one line
  check_training_fits_host(c, cfg);  // before anything large is allocated
  if (!c.model.empty() && c.device != "phantom") {
    // Weights + gradients + optimizer state of the whole model must fit one device (the
    // data-parallel lessons and single_device hold all of it on every rank).
    WorldOptions w = c.world_options();
    const int64_t capacity =
        w.capacity_override > 0 ? w.capacity_override : w.profile.memory_capacity;
    // fp32: 4 + 4 + (4 SGD momentum | 8 AdamW); bf16/fp16: 2 + 4 + (4 master + 8 AdamW)
    const int64_t per_param =
        theory::model_state_bytes(int(dtype_size(cfg.dtype)), c.optimizer).total();
    const int64_t bytes = count_params(cfg) * per_param;
    if (capacity > 0 && bytes > capacity)
      throw UsageError(fmt::format(
          "--model {} needs {} for weights, gradients and {} state on one device, more than the "
          "{} of {}: add --device phantom to run it as shapes and times only",
          c.model, format_bytes(bytes), c.optimizer, format_bytes(capacity), w.profile.name));
  }
  return cfg;
}

int64_t count_params(const GPTConfig& cfg) {
  RankContext shapes_only(0, 1, Device::phantom(), HardwareProfile::ideal(0), ClockKind::modeled);
  shapes_only.tracer.enabled = false;
  ScopedRank guard(shapes_only);
  return GPT(cfg).num_params();
}

std::unique_ptr<optim::Optimizer> make_optimizer(const CommonOptions& c, const ParamList& params) {
  const DType precision = parse_precision(c.precision);
  if (c.optimizer == "sgd") {
    if (precision != DType::f32)  // train_options refuses this first, with the usage line
      throw std::invalid_argument("--optimizer sgd runs in --precision fp32 only");
    optim::SGDOptions o;
    o.lr = static_cast<float>(c.lr);
    o.weight_decay = static_cast<float>(c.weight_decay);
    return std::make_unique<optim::SGD>(optim::whole_params(params), o);
  }
  optim::AdamWOptions o;
  o.lr = static_cast<float>(c.lr);
  o.weight_decay = static_cast<float>(c.weight_decay);
  // bf16/fp16: AdamW over fp32 master weights (optim::MixedPrecision); fp32: plain AdamW.
  return optim::make_adamw(optim::whole_params(params), precision, o);
}

void check_training_precision(const CommonOptions& c) {
  if (c.precision == "fp32") return;
  if (c.optimizer == "sgd")
    throw UsageError(fmt::format(
        "--optimizer sgd has no fp32 master weights for --precision {}: use --optimizer adamw "
        "or --precision fp32",
        c.precision));
}

train::OptimizerFactory optimizer_factory(const CommonOptions& c) {
  return [c](const ParamList& params) { return make_optimizer(c, params); };
}

train::TrainOptions train_options(const CommonOptions& c, int global_batch, const GPTConfig& cfg,
                                  nlohmann::json config) {
  check_training_precision(c);
  train::TrainOptions t;
  t.steps = c.steps;
  t.global_batch = global_batch;
  t.seq = c.seq;
  t.resume = c.resume;
  t.checkpoint = c.checkpoint;
  t.config = config.is_null() ? c.to_json() : std::move(config);
  t.model_params = c.resume.empty() ? -1 : count_params(cfg);
  // Named as the options are, so a mismatch on --resume names the option to change.
  t.model = {{"layers", cfg.layers}, {"dim", cfg.dim},
             {"heads", cfg.heads},   {"seq", cfg.seq_len},
             {"vocab", cfg.vocab},   {"tie-embeddings", cfg.tie_embeddings ? "on" : "off"}};
  if (cfg.experts > 0)  // the expert tensors' shapes: a dense checkpoint's check reads as before
    t.model.update({{"experts", cfg.experts}, {"top-k", cfg.top_k}, {"moe-every", cfg.moe_every}});
  // fp16 (5 exponent bits) loses small gradients without dynamic loss scaling: every layout
  // multiplies the loss by the scale and skips steps with inf/NaN gradients.
  if (c.precision == "fp16") t.loss_scaling = train::LossScaling{};
  return t;
}

void print_checkpoint_lines(std::ostream& out, const CommonOptions& c,
                            const train::TrainResult& r) {
  if (r.first_step > 0) fmt::print(out, "resumed from {} at step {}\n", c.resume, r.first_step);
  if (r.fresh_optimizer)
    fmt::print(out,
               "checkpoint {} holds parameters only (no optimizer state): {} starts fresh from "
               "zero state\n",
               c.resume, c.optimizer);
  if (r.checkpoint_written)
    fmt::print(out,
               "checkpoint: {} (the full model + {} state, gathered from every rank, step {})\n",
               c.checkpoint, c.optimizer, c.steps);
  print_loss_scaling(out, r);
}

void print_loss_scaling(std::ostream& out, const train::TrainResult& r) {
  if (r.loss_scale == 0) return;  // no loss scaling in this run
  std::string which;
  for (size_t i = 0; i < r.skipped_steps.size() && i < 8; ++i)
    which += fmt::format("{}{}", i ? ", " : "", r.skipped_steps[i] + 1);
  if (r.skipped_steps.size() > 8) which += ", ...";
  fmt::print(out,
             "loss scaling (fp16): {} step{} skipped on inf/NaN gradients{}, every rank together; "
             "scale now {:g}\n",
             r.skipped_steps.size(), r.skipped_steps.size() == 1 ? "" : "s",
             which.empty() ? "" : " (step " + which + ")", r.loss_scale);
}

namespace {
train::TrainResult train_measured_on(World& world, const data::Task& task,
                                     const train::TrainOptions& options, const GPTConfig& cfg,
                                     const CommonOptions& run, MeasuredRun& m) {
  return train::train(
      world, task, options,
      [&](RankContext&) {
        auto layout = std::make_unique<train::SingleDeviceLayout>(cfg, optimizer_factory(run));
        m.params = layout->model().num_params();
        return layout;
      },
      {},
      [&](RankContext& ctx, train::Layout& layout) {
        auto& single = static_cast<train::SingleDeviceLayout&>(layout);
        m.flushed_in_backward = single.backward_stores().flushed_to_zero;
        m.unchecked_stores = single.backward_stores().unchecked;
        const double steps = std::max(1, options.steps);
        m.modeled_step_seconds = ctx.clock.compute_now() / steps;
        for (const trace::Event& e : ctx.tracer.events())
          if (e.cat == trace::cat::recompute) m.recompute_seconds += e.dur / steps;
        m.memory = ctx.allocator.stats();
        if (!ctx.device.has_data()) return;
        for (train::TensorShard& shard : layout.shards())  // mixed precision: the fp32 masters
          if (shard.kind == "param")
            for (float v : shard.local.to_vector()) m.final_params.push_back(v);
      });
}
}  // namespace

MeasuredRun train_measured(const CommonOptions& c, const GPTConfig& cfg, const data::Task& task,
                           bool loss_scaling) {
  WorldOptions w = c.world_options();
  w.ranks = 1;
  w.backend = "local";
  World world(w);
  CommonOptions run = c;
  run.precision = precision_name(cfg.dtype);
  train::TrainOptions options = train_options(run, c.batch, cfg, nullptr);
  if (!loss_scaling) options.loss_scaling.reset();
  MeasuredRun m;
  train::TrainResult trained;
  try {  // one rank: its error (OutOfMemory for a batch that does not fit) is the run's
    trained = train_measured_on(world, task, options, cfg, run, m);
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
  m.losses = trained.losses;
  m.skipped_steps = trained.skipped_steps;
  m.loss_scale = trained.loss_scale == 0 ? 1.0f : trained.loss_scale;
  return m;
}

void check_side_by_side_options(const CommonOptions& c) {
  auto refuse = [](bool bad, const char* what) {
    if (bad) throw UsageError(what);
  };
  refuse(launched_by_mpi() && c.ranks != 1,
         "this lesson compares runs side by side on one rank: run it without mpirun (precision "
         "and recompute are per-device choices)");
  refuse(c.ranks != 1,
         "this lesson trains on one rank: drop --ranks (precision and recompute are per-device "
         "choices)");
  refuse(!c.clock.empty() && c.clock != "modeled",
         "this lesson reports modeled step times: drop --clock or use --clock modeled");
  refuse(!c.checkpoint.empty() || !c.resume.empty(),
         "this lesson compares several runs and writes no checkpoint: drop --checkpoint/--resume "
         "(single_device takes them with --precision and --recompute)");
  refuse(!c.trace_path.empty() || c.viz,
         "this lesson compares several runs and writes no trace: drop --trace/--viz");
  refuse(c.optimizer != "adamw", "this lesson's memory table is for AdamW: use --optimizer adamw");
  refuse(c.impl != "reference", "this lesson has no exercise implementation: drop --impl");
  c.world_options();  // validates device, profile, capacity
}

LossLog::LossLog(const CommonOptions& c, std::ostream& out)
    : out_(out), steps_(c.steps), quiet_(c.quiet), phantom_(c.device == "phantom") {
  every_ = c.log_every > 0 ? c.log_every : std::max(1, c.steps / 10);
}

void LossLog::record(int step, float loss) {
  losses_.push_back(loss);
  bool last = step + 1 == steps_;
  if (quiet_ || !(step % every_ == 0 || last)) return;
  if (phantom_) {  // shapes and times only: there is no loss to print
    fmt::print(out_, "  step {}/{}  (phantom device: timing only, no loss)\n", step + 1, steps_);
    return;
  }
  int width = static_cast<int>(std::to_string(steps_).size());
  fmt::print(out_, "  step {:>{}}/{}  loss {:.4f}\n", step + 1, width, steps_, loss);
  out_.flush();
}

void print_loss_summary(std::ostream& out, const CommonOptions& c, const std::vector<float>& losses,
                        const std::string& note) {
  if (losses.empty()) return;
  if (c.device == "phantom") {
    fmt::print(out, "\nloss: none over {} steps (phantom device: timing only, no values)\n",
               losses.size());
    return;
  }
  fmt::print(out, "\nloss: {:.4f} -> {:.4f} over {} steps{}\n", losses.front(), losses.back(),
             losses.size(), note);
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return (n < 0 ? "-" : "") + s;
}

std::string format_seconds(double s) {
  double a = std::abs(s);
  if (a >= 1) return fmt::format("{:.3f} s", s);
  if (a >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  if (a >= 1e-6) return fmt::format("{:.3f} us", s * 1e6);
  return fmt::format("{:.1f} ns", s * 1e9);
}

std::string format_comm_split(const trace::RankSummary& r) {
  return fmt::format("{} ({} on the wire + {} waiting for a partner)", format_seconds(r.comm),
                     format_seconds(r.comm_wire), format_seconds(r.comm_wait));
}

std::string describe_model(const GPTConfig& cfg, int64_t params) {
  std::string experts;
  if (cfg.experts > 0)
    experts = fmt::format(", {} experts top-{}{} ({} active per token)", cfg.experts, cfg.top_k,
                          cfg.moe_every > 1 ? fmt::format(" every {} blocks", cfg.moe_every) : "",
                          with_commas(theory::gpt_active_parameters(cfg)));
  return fmt::format("{} layers, dim {}, {} heads, seq {}, vocab {} -> {} parameters{}{}",
                     cfg.layers, cfg.dim, cfg.heads, cfg.seq_len, cfg.vocab, with_commas(params),
                     cfg.tie_embeddings ? ", tied embeddings" : "", experts);
}

std::string describe_world(const WorldOptions& w) {
  std::string dev = w.device == DeviceKind::cpu       ? "CPU virtual GPU"
                    : w.device == DeviceKind::phantom ? "phantom GPU (shapes only)"
                    : cuda::emulation_requested()     ? "CUDA GPU (emulated on the CPU)"
                                                      : "CUDA GPU";
  std::string s = fmt::format("{} x{}, clock {}", dev, w.ranks, clock_name(w.clock));
  if (w.clock == ClockKind::modeled)
    s += fmt::format(" on {} ({:.0f} TFLOP/s, {:.0f} GB/s, {} link)", w.profile.name,
                     w.profile.peak_flops / 1e12, w.profile.mem_bandwidth / 1e9,
                     w.profile.intra_node.name);
  return s;
}

void print_memory(std::ostream& out, World& world) {
  fmt::print(out, "peak memory per rank:\n  {:<6}", "rank");
  for (int c = 0; c < kNumMemCategories; ++c)
    fmt::print(out, " {:>15}", category_name(static_cast<MemCategory>(c)));
  fmt::print(out, " {:>12}\n", "all at once");
  for (int r : world.local_ranks()) {
    MemoryStats s = world.rank(r).allocator.stats();
    fmt::print(out, "  {:<6}", r);
    for (int c = 0; c < kNumMemCategories; ++c) fmt::print(out, " {:>15}", format_bytes(s.peak[c]));
    fmt::print(out, " {:>12}\n", format_bytes(s.peak_total));
  }
}

std::optional<int> last_step(const trace::Trace& trace) {
  std::optional<int> last;
  for (auto& e : trace.events)
    if (e.lane == trace::Lane::step && e.step >= 0) last = std::max(last.value_or(e.step), e.step);
  return last;
}

void print_timeline(std::ostream& out, const trace::Trace& trace, std::optional<int> step) {
  if (!step) step = last_step(trace);
  trace::AsciiTimelineOptions opt;
  opt.step = step;
  fmt::print(out, "\ntimeline{}:\n{}", step ? fmt::format(" of step {}", *step + 1) : "",
             trace::render_ascii_timeline(trace, opt));
}

void print_rank_table(std::ostream& out, const trace::Trace& trace, std::optional<int> step,
                      bool pipeline_schedule) {
  if (!step) step = last_step(trace);
  trace::TraceSummary s = trace::analyze(trace, step);
  fmt::print(out, "\nper rank{} ({} window):\n", step ? fmt::format(", step {}", *step + 1) : "",
             format_seconds(s.window.end - s.window.begin));
  // comm = wire (bytes moving) + wait (for a partner that has not sent yet): see the glossary.
  fmt::print(out, "  {:<5} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9} {:>11} {:>12}\n", "rank", "busy",
             "comm wire", "comm wait", "idle", pipeline_schedule ? "bubble" : "idle %", "overlap",
             "sent", "peak memory");
  for (const trace::RankSummary& r : s.ranks)
    fmt::print(out, "  {:<5} {:>11} {:>11} {:>11} {:>11} {:>7.1f}% {:>8.1f}% {:>11} {:>12}\n",
               r.rank, format_seconds(r.busy), format_seconds(r.comm_wire),
               format_seconds(r.comm_wait), format_seconds(r.idle), 100 * r.bubble_fraction,
               100 * r.overlap_fraction, format_bytes(r.wire_bytes),
               format_bytes(r.peak_memory.total));
}

int finish_run(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
               std::ostream& out) {
  print_timeline(out, trace);
  // "bubble" is the idle time a pipeline schedule makes; elsewhere idle time is just idle.
  print_rank_table(out, trace, {},
                   lesson == "pipeline" || lesson == "hybrid" || lesson == "model_parallel");
  return finish_trace(c, trace, lesson, out);
}

int finish_trace(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
                 std::ostream& out) {
  // Under mpirun only rank 0's process holds the merged trace (the others' is empty): it alone
  // writes the file and opens the dashboard, whatever lesson calls this.
  if (!root_process()) return 0;
  if (!c.trace_path.empty()) {
    // `--trace out/run.json` should just work: create the folder if it is missing.
    const auto folder = std::filesystem::path(c.trace_path).parent_path();
    std::error_code ignored;
    if (!folder.empty()) std::filesystem::create_directories(folder, ignored);
    trace::write_chrome_trace(trace, c.trace_path);
    fmt::print(out, "trace: {} ({} events; open with `mgpu viz {}` or in Perfetto)\n", c.trace_path,
               trace.events.size(), c.trace_path);
  }
  if (c.viz) return show_trace(trace, lesson, std::cerr);
  return 0;
}

}  // namespace mgpu::lessons

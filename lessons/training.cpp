// A training run from the common options: the task, the model config, the optimizer and the
// trainer's options.
#include "lessons/training.h"

#include <memory>
#include <string>

#include <fmt/format.h>

#include "core/optim/mixed_precision.h"
#include "core/theory/model_states.h"
#include "exercises/selection.h"
#include "lessons/host_memory_check.h"

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
  cfg.style = c.style;
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
  if (c.checkpoint_every > 0 && c.checkpoint.empty())
    throw UsageError(fmt::format("--checkpoint-every {} needs --checkpoint FILE to write to",
                                 c.checkpoint_every));
  t.checkpoint_every = c.checkpoint_every;
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

run::RunSpec run_spec(const CommonOptions& c, std::shared_ptr<const data::Task> task,
                      const GPTConfig& cfg, int global_batch, nlohmann::json config) {
  run::RunSpec spec;
  spec.model = cfg;
  spec.world = c.world_options();
  spec.train = train_options(c, global_batch, cfg, std::move(config));
  spec.task = std::move(task);
  spec.optimizer = optimizer_factory(c);
  return spec;
}

}  // namespace mgpu::lessons

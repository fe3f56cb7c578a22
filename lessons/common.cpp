#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/model/gpt.h"
#include "core/model/model_file.h"
#include "core/model/presets.h"
#include "core/runtime/cuda_emulation.h"
#include "core/runtime/input_file.h"
#include "core/runtime/profile.h"
#include "exercises/selection.h"
#include "lessons/lesson.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

void add_world_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--ranks,-n", c.ranks, "number of ranks (virtual GPUs on cpu)")
      ->check(InRange(1, 64, "ranks"))
      ->group("World");
  app.add_option("--device", c.device, "cpu | cuda | phantom (shapes only, no math)")
      ->check(CLI::IsMember({"cpu", "cuda", "phantom"}))
      ->group("World");
  app.add_option("--clock", c.clock, "modeled | wall | cuda (default: modeled on cpu/phantom)")
      ->check(CLI::IsMember({"", "modeled", "wall", "cuda"}))
      ->group("World");
  app.add_option("--profile", c.profile, "hardware profile preset or JSON file (`mgpu profiles`)")
      ->group("World");
  app.add_option("--capacity", c.capacity,
                 "per-rank memory capacity, e.g. 2GiB (default: profile's)")
      ->check(SizeAtLeast(1024, "1KiB"))
      ->group("World");
  // Below 0.1 s a busy host's ordinary waits would be reported as stuck.
  app.add_option("--comm-timeout", c.comm_timeout, "seconds before a stuck wait is reported")
      ->check(InRange(0.1, 86400, "s"))
      ->group("World");
  app.add_option("--impl", c.impl,
                 "exercise implementations: reference | mine | ex01=mine,ex03=mine,...")
      ->group("World");
}

// Switch Transformer's capacity factor: a finite number > 0, or "dropless" (no token dropped).
const CLI::Validator CapacityFactor(
    [](std::string& text) -> std::string {
      if (text == "dropless") return "";
      std::string number = text;
      std::string error = Positive(number);
      if (error.empty()) error = AtMost(GPTConfig::kMaxCapacityFactor)(number);
      return error.empty() ? ""
                           : error +
                                 " (or dropless; a factor of experts / top_k already keeps "
                                 "every token)";
    },
    "NUMBER|dropless");

// The mixture-of-experts options (core/model/moe.h); 0 experts is the dense model.
void add_expert_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--experts", c.experts, "experts per MoE block (0: the dense model)")
      ->check(NonNegative)
      ->group("Model");
  app.add_option("--top-k", c.top_k, "experts each token is sent to")
      ->check(AtLeastOne("expert"))
      ->group("Model");
  app.add_option("--moe-every", c.moe_every, "every N-th block is an MoE block (1: all)")
      ->check(AtLeastOne("block"))
      ->group("Model");
  app.add_option("--capacity-factor", c.capacity_factor,
                 "tokens an expert keeps per sequence, as a multiple of its even share "
                 "(e.g. 1.25), or dropless (the default)")
      ->check(CapacityFactor)
      ->group("Model");
  app.add_option("--aux-loss-coef", c.aux_loss_coef, "weight of the load-balancing loss")
      ->check(NonNegative)
      ->group("Model");
}

void add_model_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--layers", c.layers, "transformer blocks")
      ->check(AtLeastOne("block"))
      ->group("Model");
  app.add_option("--dim", c.dim, "model width")->check(AtLeastOne("element"))->group("Model");
  app.add_option("--heads", c.heads, "attention heads (must divide --dim)")
      ->check(AtLeastOne("head"))
      ->group("Model");
  app.add_option("--seq", c.seq, "sequence length")->check(AtLeastOne("token"))->group("Model");
  app.add_option("--model", c.model,
                 "tiny | tiny-moe | gpt2-small | gpt2-medium | gpt2-large | gpt2-xl | gpt3-2.7b | "
                 "gpt3-6.7b | gpt3-13b | mixtral-8x7b | gpt3-175b, or a JSON file {layers, dim, "
                 "heads, vocab, seq, tie_embeddings, experts, top_k, ...}; --layers etc. override "
                 "it")
      ->group("Model");
  app.add_option("--vocab", c.vocab, "vocabulary size (default: what the task needs)")
      ->check(AtLeastOne("token id"))
      ->group("Model");
  app.add_option("--tie-embeddings", c.tie_embeddings,
                 "on | off: the output head reads the token embedding (default: on for the GPT-2 "
                 "and GPT-3 presets, off for the tiny model)")
      ->check(CLI::IsMember({"on", "off"}))
      ->group("Model");
  add_expert_options(app, c);
}

// The training options, then --log-every (shown under Output).
void add_training_options(CLI::App& app, CommonOptions& c) {
  const CLI::Validator& positive = Positive;  // finite and > 0 (lessons/validate.h)
  app.add_option("--steps", c.steps, "training steps")
      ->check(AtLeastOne("step"))
      ->group("Training");
  app.add_option("--batch", c.batch, "global batch (sequences per step)")
      ->check(AtLeastOne("sequence"))
      ->group("Training");
  app.add_option("--task", c.task, "markov | reverse | modadd | text (with --data)")
      ->group("Training");
  app.add_option("--data", c.data_file, "a text file to train on, byte-level (implies --task text)")
      ->check(InputFile(kMaxDataFileBytes))
      ->group("Training");
  app.add_option("--optimizer", c.optimizer, "adamw | sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->group("Training");
  app.add_option("--lr", c.lr, "learning rate")
      ->check(positive)
      ->check(FloatRange)
      ->group("Training");
  app.add_option("--weight-decay", c.weight_decay,
                 "AdamW's decoupled weight decay (PyTorch's default 0.01); SGD: L2 on the gradient")
      ->check(NonNegative)
      ->check(FloatRange)
      ->group("Training");
  app.add_option("--seed", c.seed, "seed for init and data")->check(Unsigned)->group("Training");
  app.add_option("--checkpoint", c.checkpoint, "save parameters + optimizer state here at the end")
      ->check(OutputFile)
      ->group("Training");
  app.add_option("--resume", c.resume, "start from this checkpoint")
      ->check(InputFile(kMaxCheckpointBytes))
      ->group("Training");
  app.add_option("--precision", c.precision,
                 "fp32 | bf16 | fp16: weights and activations (bf16/fp16 keep fp32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->group("Training");
  app.add_option("--recompute", c.recompute,
                 "none | selective | full: activations recomputed in backward instead of kept")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group("Training");
  app.add_option("--log-every", c.log_every, "print the loss every K steps (0 = ~10 lines)")
      ->check(NonNegative)
      ->group("Output");
}

void add_output_options(CLI::App& app, CommonOptions& c) {
  app.add_option("--trace", c.trace_path, "write the Chrome/Perfetto trace JSON here")
      ->check(OutputFile)
      ->group("Output");
  app.add_flag("--viz", c.viz, "open the dashboard on the trace when done")->group("Output");
  app.add_flag("--quiet,-q", c.quiet, "print only the summary")->group("Output");
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& c, const LessonDefaults& d) {
  c.ranks = d.ranks;
  c.steps = d.steps;
  c.batch = d.batch;
  c.layers = d.layers;
  add_world_options(app, c);
  if (d.model_options) {
    add_model_options(app, c);
    add_training_options(app, c);
  }
  add_output_options(app, c);
}

void apply_model_preset(CommonOptions& c, const std::vector<std::string>& given) {
  if (c.model.empty()) return;
  ModelPreset chosen{
      "",        c.layers, c.dim,          c.heads, c.seq, c.vocab, c.tie_embeddings == "on",
      c.experts, c.top_k,  c.expert_hidden};
  auto typed = [&](const char* name) {
    return std::find(given.begin(), given.end(), name) != given.end();
  };
  if (const ModelPreset* preset = find_model_preset(c.model)) {
    chosen = *preset;
  } else {
    if (c.model.size() < 5 || c.model.substr(c.model.size() - 5) != ".json")
      throw UsageError(fmt::format("unknown --model '{}': use one of {} or a JSON file",
                                   echo_input(c.model), fmt::join(model_preset_names(), ", ")));
    const ModelShape shape = read_model_file(c.model);  // invalid_argument: one line, exit 2
    chosen.layers = shape.layers;
    chosen.dim = shape.dim;
    chosen.heads = shape.heads;
    chosen.seq = shape.seq;
    chosen.vocab = shape.vocab;
    chosen.tie_embeddings = shape.tie_embeddings.value_or(false);
    chosen.experts = shape.experts;
    chosen.top_k = shape.top_k;
    chosen.expert_hidden = shape.expert_hidden;
    if (!typed("--moe-every")) c.moe_every = shape.moe_every;
    if (!typed("--capacity-factor") && shape.capacity_factor)
      c.capacity_factor =
          *shape.capacity_factor == 0 ? "dropless" : fmt::format("{}", *shape.capacity_factor);
    if (!typed("--aux-loss-coef") && shape.aux_loss_coef) c.aux_loss_coef = *shape.aux_loss_coef;
  }
  if (!typed("--layers")) c.layers = chosen.layers;
  if (!typed("--dim")) c.dim = chosen.dim;
  if (!typed("--heads")) c.heads = chosen.heads;
  if (!typed("--seq")) c.seq = chosen.seq;
  if (!typed("--tie-embeddings")) c.tie_embeddings = chosen.tie_embeddings ? "on" : "off";
  if (!typed("--experts")) c.experts = chosen.experts;
  if (!typed("--top-k")) c.top_k = chosen.top_k;
  c.expert_hidden = chosen.expert_hidden;
  const bool real_data = !c.data_file.empty() || c.task == "text";  // keeps its own vocabulary
  if (!typed("--vocab") && !real_data) c.vocab = chosen.vocab;
}

namespace {
// One typed word as the processes compare it: converted as CLI11 converts it for the option's type
// and printed in shortest round-trip form, so `--lr 0.1` and `--lr 1e-1` agree while
// `--seed 010` (octal, 8) and `--seed 10` do not; any other word as typed.
std::string canonical_word(const std::string& type, const std::string& word) {
  auto as = [&word](auto value) {
    return CLI::detail::lexical_cast(word, value) ? fmt::format("{}", value) : word;
  };
  if (type.starts_with("UINT")) return as(uint64_t{});
  if (type.starts_with("INT")) return as(int64_t{});
  if (type.starts_with("FLOAT")) return as(double{});
  return word;
}

std::string canonical_words(const CLI::Option& option, const std::vector<std::string>& words) {
  std::vector<std::string> out;
  for (const std::string& word : words) out.push_back(canonical_word(option.get_type_name(), word));
  return fmt::format("{}", fmt::join(out, " "));
}
}  // namespace

RunConfig resolved_run_config(const std::string& lesson, const CLI::App& app,
                              const CommonOptions& common) {
  RunConfig config = {{"lesson", lesson}};
  const std::map<std::string, int> resolved = {{"--ranks", common.ranks},
                                               {"--layers", common.layers},
                                               {"--dim", common.dim},
                                               {"--heads", common.heads},
                                               {"--seq", common.seq},
                                               {"--vocab", common.vocab},
                                               {"--experts", common.experts},
                                               {"--top-k", common.top_k},
                                               {"--moe-every", common.moe_every}};
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (name == "--help" || name.empty()) continue;
    std::string value;
    if (auto it = resolved.find(name); it != resolved.end())
      value = std::to_string(it->second);
    else if (option->count() > 0)
      value = canonical_words(*option, option->results());
    else
      value = canonical_words(*option, {option->get_default_str()});
    config.emplace_back(name, value);
  }
  return config;
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

namespace {
int env_int(std::initializer_list<const char*> vars, int fallback) {
  for (const char* var : vars)
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return fallback;
}
}  // namespace

bool root_process() {
  return !launched_by_mpi() || env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, 0) == 0;
}

void apply_mpi_world_size(CommonOptions& c, bool ranks_given) {
  if (!launched_by_mpi()) return;
  const int size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, c.ranks);
  if (ranks_given && c.ranks != size)
    throw UsageError(fmt::format(
        "--ranks {} but mpirun started {} processes (one per rank): drop --ranks or use "
        "mpirun -n {}",
        c.ranks, size, c.ranks));
  c.ranks = size;
}

int64_t parse_bytes(const std::string& text) {
  return parse_size(text);
}

WorldOptions CommonOptions::world_options() const {
  WorldOptions w;
  w.ranks = ranks;
  w.device = parse_device_kind(device);
  // cuda's default is its own clock, CUDA events; an emulated GPU (cuda_emulation.h) has none.
  const bool real_cuda = w.device == DeviceKind::cuda && !cuda::emulation_requested();
  w.clock =
      clock.empty() ? (real_cuda ? ClockKind::cuda : ClockKind::modeled) : parse_clock_kind(clock);
  if (w.clock == ClockKind::cuda && w.device != DeviceKind::cuda)
    throw UsageError("--clock cuda needs --device cuda (use --clock modeled or wall on cpu)");
  if (w.device == DeviceKind::phantom && w.clock != ClockKind::modeled)
    throw UsageError("the phantom device does no work, so only --clock modeled can time it");
  w.profile = HardwareProfile::load(profile);  // throws invalid_argument listing presets
  w.comm_timeout = comm_timeout;
  w.backend = backend;
  if (!capacity.empty()) w.capacity_override = parse_bytes(capacity);
  w.run_config = run_config;
  w.all_reduce = ex::selected_seams().comm.all_reduce;  // exercise 01, as --impl selected
  return w;
}

nlohmann::json CommonOptions::to_json() const {
  nlohmann::json j = {{"ranks", ranks},
                      {"device", device},
                      {"clock", clock.empty() ? "default" : clock},
                      {"profile", profile},
                      {"impl", impl},
                      {"layers", layers},
                      {"dim", dim},
                      {"heads", heads},
                      {"seq", seq},
                      {"vocab", vocab},
                      {"model", model},
                      {"steps", steps},
                      {"batch", batch},
                      {"task", task},
                      {"optimizer", optimizer},
                      {"lr", lr},
                      {"weight_decay", weight_decay},
                      {"seed", seed},
                      {"precision", precision},
                      {"recompute", recompute}};
  if (experts > 0)  // a dense run's configuration reads as before
    j.update({{"experts", experts},
              {"top_k", top_k},
              {"moe_every", moe_every},
              {"capacity_factor", capacity_factor},
              {"aux_loss_coef", aux_loss_coef}});
  return j;
}

}  // namespace mgpu::lessons

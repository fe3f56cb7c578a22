// What a lesson's CommonOptions resolve to: a --model preset or file, the world size under mpirun,
// and the WorldOptions and JSON configuration the run is built from.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/model/gpt.h"
#include "core/model/model_file.h"
#include "core/model/presets.h"
#include "core/ops/cuda_emulation.h"
#include "core/runtime/input_file.h"
#include "core/runtime/profile.h"
#include "exercises/selection.h"
#include "lessons/lesson.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

void apply_model_preset(CommonOptions& c, const std::vector<std::string>& given) {
  if (c.model.empty()) return;
  ModelPreset chosen{
      "",        c.layers, c.dim,           c.heads, c.seq, c.vocab, c.tie_embeddings == "on",
      c.experts, c.top_k,  c.expert_hidden, c.style};
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
    chosen.style = shape.style;
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
  const BlockStyle typed_style = c.style;
  c.style = chosen.style;
  if (typed("--kv-heads")) c.style.kv_heads = typed_style.kv_heads;
  if (typed("--ffn-dim")) c.style.ffn_dim = typed_style.ffn_dim;
  const bool real_data = !c.data_file.empty() || c.task == "text";  // keeps its own vocabulary
  if (!typed("--vocab") && !real_data) c.vocab = chosen.vocab;
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
  w.profile.faults = fault_plan(false);        // checked once against the command line (cli.cpp)
  const FaultPlan& f = w.profile.faults;
  if (w.clock != ClockKind::modeled &&
      (!f.slow_ranks.empty() || !f.slow_links.empty() || f.jitter > 0))
    throw UsageError(fmt::format(
        "--slow-rank, --slow-link and --jitter change the modeled clock's prices; --clock {} "
        "measures real time: use --clock modeled",
        clock_name(w.clock)));
  w.comm_timeout = comm_timeout;
  w.backend = backend;
  if (!capacity.empty()) w.capacity_override = parse_bytes(capacity);
  w.run_config = run_config;
  w.all_reduce = ex::selected_seams().comm.all_reduce;  // exercise 01, as --impl selected
  return w;
}

FaultPlan CommonOptions::fault_plan(bool check) const {
  FaultPlan plan;
  try {
    for (const std::string& text : slow_rank) plan.slow_ranks.push_back(parse_slow_rank(text));
    for (const std::string& text : slow_link) plan.slow_links.push_back(parse_slow_link(text));
    if (!jitter.empty()) plan.jitter = parse_jitter(jitter);
    if (!fail_rank.empty()) plan.fail = parse_fail_rank(fail_rank);
    if (check) plan.check(ranks, steps);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  plan.seed = seed;
  return plan;
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
  if (!style.is_gpt2())  // as the model file names them; GPT-2's block reads as before
    j.update({{"norm", norm_name(style.norm)},
              {"mlp", mlp_name(style.mlp)},
              {"ffn_dim", style.ffn_dim},
              {"positions", positions_name(style.positions)},
              {"rope_theta", style.rope_theta},
              {"kv_heads", style.kv_heads},
              {"bias", style.bias}});
  return j;
}

}  // namespace mgpu::lessons

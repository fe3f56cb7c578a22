// `mgpu plan --model NAME|FILE.json --gpus N [--profile P] [--global-batch B] [--seq T] [--top K]
// [--dp --tp --pp --cp --microbatch-size --schedule --zero --precision --recompute] [--json]`:
// enumerates the layouts of the model on N GPUs, screens them by formula, simulates the promising
// ones on the modeled clock (core/plan/search.h) and prints the best by tokens/s, the rejected
// ones with why, and how much was searched.
#include "lessons/plan.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/runtime/allocator.h"
#include "core/theory/schedule_kind.h"
#include "exercises/selection.h"
#include "lessons/cli.h"
#include "lessons/lesson.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

PlanModel plan_model(const std::string& name_or_file) {
  CommonOptions c;
  c.model = name_or_file;
  apply_model_preset(c, {});  // throws UsageError naming the presets
  PlanModel m{.name = name_or_file};
  m.config.layers = c.layers;
  m.config.dim = c.dim;
  m.config.heads = c.heads;
  m.config.seq_len = c.seq;
  m.config.tie_embeddings = c.tie_embeddings == "on";
  m.config.style = c.style;
  if (c.vocab > 0) m.config.vocab = c.vocab;  // "tiny" trains on a task's vocabulary: the default
  set_expert_config(m.config, c);  // a preset's or model file's experts (mixtral-8x7b: 8, top 2)
  m.default_global_batch = name_or_file.rfind("gpt3-", 0) == 0 ? 1536 : 512;
  return m;
}

plan::SearchResult run_search(const plan::SearchRequest& request, std::ostream& progress) {
  return plan::search(request,
                      [&](int done, int planned, const plan::Layout& l, const plan::Prediction& p) {
                        fmt::print(progress, "  simulated [{:>2} of <= {}] {:<62} ({:.2f} s)\n",
                                   done, planned, plan::describe(l), p.wall_seconds);
                        progress.flush();
                      });
}

namespace {

// The schedules the hybrid mesh (and so the planner) runs, from the registry.
std::vector<std::string> mesh_schedule_names() {
  std::vector<std::string> names;
  for (const theory::ScheduleTraits& t : theory::all_schedules())
    if (t.runs_on_mesh) names.push_back(t.name);
  return names;
}

// What `mgpu plan` reads from its command line; a pin left at 0 (-1 for --zero, empty for the
// strings) is searched.
struct PlanArgs {
  std::string model, profile = "DGX-H100", precision, schedule, recompute, sp, vocab_head;
  int gpus = 0, global_batch = 0, seq = 0, top = 5,
      max_simulated = plan::SearchRequest{}.max_simulated;
  int dp = 0, tp = 0, pp = 0, cp = 0, ep = 0, mbs = 0, zero = -1, virtual_stages = 0;
  bool json = false;
};

void add_plan_options(CLI::App& app, PlanArgs& a) {
  app.add_option("--model", a.model,
                 "gpt2-small ... gpt2-xl, gpt3-2.7b ... gpt3-175b, mixtral-8x7b, or a JSON file "
                 "{layers, dim, heads, seq, vocab, experts, top_k, ...}")
      ->required();
  app.add_option("--gpus", a.gpus, "number of GPUs")
      ->required()
      ->check(InRange(1, 1 << 20, "GPUs"));
  app.add_option("--profile", a.profile, "hardware profile (`mgpu profiles`) or JSON file")
      ->capture_default_str();
  app.add_option("--global-batch", a.global_batch,
                 "sequences per step (default: the preset's; GPT-3 1536, otherwise 512)")
      ->check(InRange(1, 1 << 24, "sequences"));
  app.add_option("--seq", a.seq, "sequence length (default: the model's)")
      ->check(InRange(1, 1 << 24, "tokens"));
  app.add_option("--top", a.top, "layouts shown")
      ->capture_default_str()
      ->check(InRange(1, 1000, "layouts"));
  app.add_option("--max-simulated", a.max_simulated,
                 "layouts simulated in the screen's order, then at most as many neighbours of "
                 "the fastest per move while they are faster, 3x in all (more is slower and "
                 "surer)")
      ->capture_default_str()
      ->check(InRange(1, 10000, "layouts"));
  app.add_flag("--json", a.json,
               "print the --top ranked layouts as JSON (progress goes to stderr)");
  auto pin = [&](const char* name, int& value, const char* what, const char* unit) {
    app.add_option(name, value, what)->check(InRange(1, 1 << 20, unit))->group("Pins");
  };
  pin("--dp", a.dp, "data-parallel replicas", "replicas");
  pin("--tp", a.tp, "tensor-parallel size (divides the heads)", "ranks");
  pin("--pp", a.pp, "pipeline stages (divides the layers)", "stages");
  pin("--cp", a.cp, "context-parallel size (splits the sequence)", "ranks");
  pin("--ep", a.ep, "expert-parallel size (models with experts: divides dp and the experts)",
      "ranks");
  pin("--microbatch-size", a.mbs, "sequences per micro-batch", "sequences");
  app.add_option("--zero", a.zero,
                 "ZeRO stage over dp: 0 to 3 (searched: 0, and 1 where dp > 1; 2 and 3 keep "
                 "ZeRO-1's peak during the step)")
      ->check(CLI::IsMember({0, 1, 2, 3}))
      ->group("Pins");
  app.add_option("--schedule", a.schedule,
                 "gpipe | 1f1b | interleaved | zb-h1 | zbv | dualpipev | dualpipe")
      ->check(CLI::IsMember(mesh_schedule_names()))
      ->group("Pins");
  pin("--virtual-stages", a.virtual_stages,
      "chunks per stage, V (interleaved: pp x V divides the layers; 1 for the others)", "chunks");
  app.add_option("--sp", a.sp,
                 "sequence parallelism in the blocks: on | off (default: on where "
                 "the engine runs it)")
      ->check(CLI::IsMember({"on", "off"}))
      ->group("Pins");
  app.add_option("--vocab-head", a.vocab_head,
                 "the vocabulary-parallel head: on | off (default: on where the engine runs it)")
      ->check(CLI::IsMember({"on", "off"}))
      ->group("Pins");
  app.add_option("--precision", a.precision, "fp32 | bf16 | fp16 | any (default: bf16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "any"}))
      ->group("Pins");
  app.add_option("--recompute", a.recompute, "none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group("Pins");
}

// The search the arguments ask for; throws UsageError (one line) for a step of more tokens than
// the simulation samples and std::invalid_argument for a bad profile or model.
plan::SearchRequest make_request(const PlanArgs& a, const PlanModel& chosen) {
  plan::SearchRequest request;
  request.workload.model = chosen.config;
  request.workload.seams = ex::selected_seams().hybrid();
  if (a.seq > 0) request.workload.model.seq_len = a.seq;
  request.gpus = a.gpus;
  request.global_batch = a.global_batch > 0 ? a.global_batch : chosen.default_global_batch;
  request.profile = HardwareProfile::load(a.profile);
  request.top = a.top;
  request.max_simulated = a.max_simulated;
  plan::Pins& pins = request.pins;
  if (a.dp > 0) pins.dp = a.dp;
  if (a.tp > 0) pins.tp = a.tp;
  if (a.pp > 0) pins.pp = a.pp;
  if (a.cp > 0) pins.cp = a.cp;
  if (a.ep > 0) pins.ep = a.ep;
  if (a.mbs > 0) pins.microbatch_size = a.mbs;
  if (a.zero >= 0) pins.zero = a.zero;
  if (!a.schedule.empty()) pins.schedule = a.schedule;
  if (!a.recompute.empty()) pins.recompute = a.recompute;
  if (a.virtual_stages > 0) pins.virtual_stages = a.virtual_stages;
  if (!a.sp.empty()) pins.sp = a.sp == "on";
  if (!a.vocab_head.empty()) pins.vocab_head = a.vocab_head == "on";
  if (a.precision == "any")
    pins.precisions = {"bf16", "fp16", "fp32"};
  else if (!a.precision.empty())
    pins.precisions = {a.precision};
  request.workload.model.validate();
  // The engine samples a step's token ids on the host: bound the tokens per step (GPT-3 trains
  // 3.1 M; this allows 43 times that).
  constexpr int64_t kMaxTokens = int64_t{1} << 27;
  const int64_t tokens = int64_t{request.global_batch} * request.workload.model.seq_len;
  if (tokens > kMaxTokens)
    throw UsageError(fmt::format(
        "--global-batch {} x --seq {} = {} tokens per step is more than the simulation samples "
        "(at most {}): use --global-batch {} or less",
        request.global_batch, request.workload.model.seq_len, tokens, kMaxTokens,
        kMaxTokens / request.workload.model.seq_len));
  return request;
}

void print_plan_header(std::ostream& out, const plan::SearchRequest& request,
                       const std::string& model_name) {
  const GPTConfig& m = request.workload.model;
  const int nodes =
      (request.gpus + request.profile.ranks_per_node - 1) / request.profile.ranks_per_node;
  fmt::print(out, "model:   {} ({})\n", model_name, describe_model(m, count_params(m)));
  fmt::print(out, "cluster: {} GPUs = {} node{} of {} ({}; {} per GPU)\n", request.gpus, nodes,
             nodes == 1 ? "" : "s", request.profile.name, request.profile.description,
             format_bytes(request.profile.memory_capacity));
  fmt::print(out,
             "batch:   {} sequences x {} tokens per step, AdamW\n"
             "search:  a formula screen (memory: a lower bound of the peak, so it drops only "
             "what cannot fit; time: roofline + ring collectives + bubble) picks which layouts "
             "to simulate on the modeled clock: its first {} (more while none of them fits), "
             "then the neighbours of the fastest (one or two knobs moved; up to {} per move, {} "
             "in all) while they are faster, plus the near misses over capacity that show why "
             "they lose\n",
             request.global_batch, m.seq_len, request.max_simulated, request.max_simulated,
             3 * request.max_simulated);
  const plan::Knobs knobs = plan::knobs(request.pins);
  std::vector<std::string> pinned;
  for (const auto& [option, value] : knobs.pinned) pinned.push_back(option + " " + value);
  const auto listed = [](const std::vector<std::string>& items) {
    return items.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(items, ", "));
  };
  std::vector<std::string> defaults;
  for (const auto& [option, value] : knobs.defaults) defaults.push_back(option + " " + value);
  fmt::print(out, "pinned:  {}\nsearched: {}\ndefault: {}\n", listed(pinned),
             listed(knobs.searched), listed(defaults));
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "which layout should this model use on N GPUs? Enumerates dp x tp x pp x cp (x ep for a "
      "model with experts), "
      "micro-batching, schedule, ZeRO, recompute and precision; simulates the promising "
      "layouts on the modeled clock and ranks them by tokens/s",
      "mgpu plan");
  PlanArgs a;
  add_plan_options(app, a);
  bool done = false;
  const int rc = parse_command(app, args, out, err, "plan", done);
  if (done) return rc;

  try {
    const PlanModel chosen = plan_model(a.model);
    const plan::SearchRequest request = make_request(a, chosen);
    // Pins no layout satisfies: one line before anything is printed (the search repeats this).
    plan::enumerate_layouts(request.workload.model, a.gpus, request.global_batch, request.pins);
    std::ostream& progress = a.json ? err : out;
    if (!a.json) print_plan_header(out, request, chosen.name);
    ex::select_impl("reference", progress);  // the engine runs the reference pipeline schedules
    const plan::SearchResult result = run_search(request, progress);
    if (result.simulated == 0 && !result.refused.empty()) {
      std::vector<std::string> reasons;
      for (const auto& [reason, count] : result.refused) reasons.push_back(reason);
      return usage_error(err, "plan",
                         fmt::format("the engine refuses every layout these pins allow: {}",
                                     fmt::join(reasons, "; ")));
    }
    if (a.json)
      out << plan_json(request, result, chosen.name).dump(2) << "\n";
    else
      print_plan(out, request, result, chosen.name);
    return 0;
  } catch (const std::invalid_argument& e) {  // UsageError too: model, profile, pins, batch
    return usage_error(err, "plan", e.what());
  } catch (const std::exception& e) {
    fmt::print(err, "mgpu plan: failed: {}\n", e.what());
    return 1;
  }
}

}  // namespace mgpu::lessons

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

#include "core/tensor/allocator.h"
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
  if (c.vocab > 0) m.config.vocab = c.vocab;  // "tiny" trains on a task's vocabulary: the default
  set_expert_config(m.config, c);  // a preset's or model file's experts (mixtral-8x7b: 8, top 2)
  m.default_global_batch = name_or_file.rfind("gpt3-", 0) == 0 ? 1536 : 512;
  return m;
}

plan::SearchResult run_search(const plan::SearchRequest& request, std::ostream& progress) {
  return plan::search(request,
                      [&](int done, int planned, const plan::Layout& l, const plan::Prediction& p) {
                        fmt::print(progress, "  simulated [{:>2}/{}] {:<62} ({:.2f} s)\n", done,
                                   planned, plan::describe(l), p.wall_seconds);
                        progress.flush();
                      });
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
}

namespace {

std::string tokens_rate(double tokens_per_s) {
  return tokens_per_s >= 1e6 ? fmt::format("{:.2f} M", tokens_per_s / 1e6)
                             : fmt::format("{:.1f} k", tokens_per_s / 1e3);
}

// The ep column, shown only for a model with experts (a dense model's table is unchanged).
std::string ep_column(bool moe, const std::string& value) {
  return moe ? fmt::format(" {:>3}", value) : "";
}

void print_row(std::ostream& out, const std::string& rank, const plan::Simulated& s, bool moe) {
  const plan::Layout& l = s.layout;
  const plan::Prediction& p = s.prediction;
  fmt::print(
      out,
      "  {:>3} {:>4} {:>3} {:>3} {:>3}{} {:>4} {:>5} {:>11} {:>4} {:>4} {:>9} | {:>9} {:>8.1f} "
      "{:>5.1f}% {:>9} {:>6.1f}% {:>9.3f} s\n",
      rank, l.dp, l.tp, l.pp, l.cp, ep_column(moe, std::to_string(l.ep)), l.microbatch_size,
      l.microbatches, l.schedule, l.zero, l.precision, l.recompute, tokens_rate(p.tokens_per_s),
      p.tflops_per_gpu, 100 * p.mfu, gib(p.memory_peak_total), 100 * p.bubble_fraction,
      p.exposed_comm_seconds);
}

void print_header(std::ostream& out, bool moe) {
  fmt::print(out,
             "  {:>3} {:>4} {:>3} {:>3} {:>3}{} {:>4} {:>5} {:>11} {:>4} {:>4} {:>9} | {:>9} {:>8} "
             "{:>6} {:>9} {:>7} {:>11}\n",
             "#", "dp", "tp", "pp", "cp", ep_column(moe, "ep"), "mbs", "M", "schedule", "zero",
             "prec", "recompute", "tokens/s", "TFLOP/s", "MFU", "mem/GPU", "idle", "exposed comm");
}

nlohmann::json layout_json(const plan::Simulated& s, bool moe) {
  const plan::Layout& l = s.layout;
  const plan::Prediction& p = s.prediction;
  nlohmann::json memory;
  for (int c = 0; c < kNumMemCategories; ++c)
    memory[category_name(static_cast<MemCategory>(c))] = p.memory_peak[c];
  memory["total"] = p.memory_peak_total;
  nlohmann::json j = {{"dp", l.dp},
                      {"tp", l.tp},
                      {"pp", l.pp},
                      {"cp", l.cp},
                      {"microbatch_size", l.microbatch_size},
                      {"microbatches", l.microbatches},
                      {"schedule", l.schedule},
                      {"virtual_stages", l.virtual_stages},
                      {"zero", l.zero},
                      {"precision", l.precision},
                      {"recompute", l.recompute},
                      {"step_seconds", p.step_seconds},
                      {"tokens_per_s", p.tokens_per_s},
                      {"tflops_per_gpu", p.tflops_per_gpu},
                      {"mfu", p.mfu},
                      {"bubble_fraction", p.bubble_fraction},
                      {"exposed_comm_seconds", p.exposed_comm_seconds},
                      {"tp_crosses_nodes", p.tp_crosses_nodes},
                      {"memory_stage", p.worst_stage},
                      {"memory_bytes", memory}};
  if (moe) j["ep"] = l.ep;
  if (!s.why.empty()) j["why"] = s.why;
  return j;
}

}  // namespace

void print_plan(std::ostream& out, const plan::SearchRequest& r, const plan::SearchResult& result,
                const std::string& model_name, PlanDetail detail) {
  const GPTConfig& m = r.workload.model;
  const HardwareProfile& p = r.profile;
  const int nodes = (r.gpus + p.ranks_per_node - 1) / p.ranks_per_node;
  for (const std::string& note : result.notes) fmt::print(out, "note: {}\n", note);
  const size_t shown = std::min<size_t>(r.top, result.ranked.size());
  fmt::print(out,
             "\nbest {} of {} simulated layouts that fit, by tokens/s (every figure below is "
             "plan::simulate's modeled clock, never the screen's formula):\n",
             shown, result.ranked.size());
  if (shown == 0)
    fmt::print(out, "  none fits in {} per GPU: see the rejected ones below\n",
               gib(p.memory_capacity));
  else
    print_header(out, m.experts > 0);
  for (size_t i = 0; i < shown; ++i)
    print_row(out, std::to_string(i + 1), result.ranked[i], m.experts > 0);
  if (shown > 0) {
    const plan::Simulated& best = result.ranked[0];
    const DType dtype = parse_precision(best.layout.precision);
    fmt::print(out,
               "  tokens/s = {} x {} tokens / step time ({:.3f} s for #1); MFU = TFLOP/s per GPU "
               "/ the {} peak {:.1f} TFLOP/s; memory = the allocator's peak on the fullest "
               "stage\n",
               r.global_batch, m.seq_len, best.prediction.step_seconds, dtype_name(dtype),
               p.peak_for(dtype) / 1e12);
    if (m.experts > 0)
      fmt::print(out,
                 "  #1's {} experts per MoE block sit {} per GPU over ep {}: each MoE block "
                 "sends its routed tokens to them and back by two all-to-alls forward, two "
                 "backward\n",
                 m.experts, m.experts / best.layout.ep, best.layout.ep);
    if (best.layout.tp > 1)
      fmt::print(out, "  #1's tensor-parallel group {} a node ({} GPUs per node)\n",
                 best.prediction.tp_crosses_nodes ? "CROSSES" : "stays inside", p.ranks_per_node);
    else
      fmt::print(out, "  #1 has no tensor parallelism (tp 1): no all-reduce inside its layers\n");
  }
  if (detail == PlanDetail::brief) {
    fmt::print(out, "  ({} layouts enumerated, {} simulated, {} over capacity, in {:.1f} s)\n",
               result.enumerated, result.simulated, result.rejected.size(), result.wall_seconds);
    return;
  }
  std::vector<const plan::Simulated*> why;
  for (size_t i = shown; i < result.ranked.size() && why.size() < 4; ++i)
    why.push_back(&result.ranked[i]);
  if (!why.empty()) {
    fmt::print(out, "\nslower layouts, and why (vs #1):\n");
    for (const plan::Simulated* s : why)
      fmt::print(out, "  {:<62} {}\n", plan::describe(s->layout), s->why);
  }
  if (!result.rejected.empty()) {
    fmt::print(out, "\nrejected (simulated peak memory over the {} per GPU):\n",
               gib(p.memory_capacity));
    for (const plan::Simulated& s : result.rejected)
      fmt::print(out, "  {:<62} {:.2f} M tokens/s if it fit; {}\n", plan::describe(s.layout),
                 s.prediction.tokens_per_s / 1e6, s.why);
  }
  if (!result.refused.empty())
    fmt::print(out,
               "\nnot simulated: layouts the engine refuses today, among those the search "
               "reached (they join the search once it runs them):\n");
  for (const auto& [reason, count] : result.refused)
    fmt::print(out, "  {:>6} layouts: {}\n", count, reason);
  fmt::print(out,
             "\nsearched {} layouts of {} on {} GPUs ({} node{} of {}): {} over capacity by the "
             "screen's formula (not simulated), {} simulated, in {:.1f} s\n",
             result.enumerated, model_name, r.gpus, nodes, nodes == 1 ? "" : "s", p.name,
             result.screened_out, result.simulated, result.wall_seconds);
}

nlohmann::json plan_json(const plan::SearchRequest& r, const plan::SearchResult& result,
                         const std::string& model_name) {
  const bool moe = r.workload.model.experts > 0;
  nlohmann::json ranked = nlohmann::json::array(), rejected = nlohmann::json::array();
  for (size_t i = 0; i < std::min<size_t>(r.top, result.ranked.size()); ++i)
    ranked.push_back(layout_json(result.ranked[i], moe));
  for (const plan::Simulated& s : result.rejected) rejected.push_back(layout_json(s, moe));
  nlohmann::json refused = nlohmann::json::array();
  for (const auto& [reason, count] : result.refused)
    refused.push_back({{"reason", reason}, {"layouts", count}});
  const GPTConfig& m = r.workload.model;
  return {{"model",
           {{"name", model_name},
            {"layers", m.layers},
            {"dim", m.dim},
            {"heads", m.heads},
            {"seq", m.seq_len},
            {"vocab", m.vocab}}},
          {"gpus", r.gpus},
          {"profile", r.profile.name},
          {"memory_capacity_bytes", r.profile.memory_capacity},
          {"global_batch", r.global_batch},
          {"layouts", ranked},
          {"rejected", rejected},
          {"refused", refused},
          {"notes", result.notes},
          {"enumerated", result.enumerated},
          {"screened_out", result.screened_out},
          {"simulated", result.simulated},
          {"wall_seconds", result.wall_seconds}};
}

namespace {

// What `mgpu plan` reads from its command line; a pin left at 0 (-1 for --zero, empty for the
// strings) is searched.
struct PlanArgs {
  std::string model, profile = "DGX-H100", precision, schedule, recompute;
  int gpus = 0, global_batch = 0, seq = 0, top = 5,
      max_simulated = plan::SearchRequest{}.max_simulated;
  int dp = 0, tp = 0, pp = 0, cp = 0, ep = 0, mbs = 0, zero = -1;
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
                 "layouts simulated (in the screen's order; more is slower and surer)")
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
  app.add_option("--zero", a.zero, "ZeRO stage over dp: 0 or 1")
      ->check(CLI::IsMember({0, 1}))
      ->group("Pins");
  app.add_option("--schedule", a.schedule,
                 "gpipe | 1f1b | interleaved (V = 2) | zb-h1 | zbv | dualpipev | dualpipe")
      ->check(
          CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev", "dualpipe"}))
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
             "search:  a formula screen (memory: core/memory/activations.h; time: roofline + "
             "ring collectives + bubble) only picks which layouts to simulate on the modeled "
             "clock: its first {} (more while none of them fits), plus the near misses over "
             "capacity that show why they lose\n",
             request.global_batch, m.seq_len, request.max_simulated);
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

// Lesson 16 — hybrid DP x TP x PP ("3D parallelism"). The ranks form a mesh: tensor-parallel
// groups (tp, neighbours: one node's fast links) split every block; pipeline stages (pp) split
// the layers and pass activations point to point; data-parallel replicas (dp) of the whole
// pipeline split the batch and average gradients once per step (optionally ZeRO-1 over dp, and cp
// ranks splitting every sequence inside a stage). The lesson prints who is who on
// the mesh, then measures each group's traffic from the trace beside its formula, the pipeline
// bubble beside theory, and memory per rank by category.
#include "lessons/hybrid.h"

#include <map>
#include <mutex>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/parallel/hybrid.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/trace/analysis.h"
#include "lessons/exercise_views.h"
#include "lessons/impl.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

using parallel::Axis;

struct HybridLessonOptions {
  int dp = 0;  // 0: whatever --ranks leaves after tp and pp
  int tp = 2, pp = 2;
  std::string schedule = "1f1b";
  int microbatches = 4;
  int zero = 0;            // 1: ZeRO-1 over dp
  int virtual_stages = 1;  // interleaved: chunks per stage
  int cp = 1;              // context parallelism inside each stage (ring attention, zigzag)
};

// "dp1 pp0 tp1" (and " cp1" when the mesh has a cp axis): who rank r is on the mesh.
std::string coord_label(const parallel::MeshShape& shape, int r) {
  const auto c = parallel::mesh_coords(shape, r);
  return fmt::format("dp{} pp{} tp{}{}", c[int(Axis::dp)], c[int(Axis::pp)], c[int(Axis::tp)],
                     shape.cp > 1 ? fmt::format(" cp{}", c[int(Axis::cp)]) : "");
}

// "GPU 5  dp1 pp0 tp1" for every rank, then each axis's groups by their members.
// Also says which groups cross nodes of the profile (`per_node` GPUs each): their collectives
// ride the slower link between nodes.
void print_mesh(std::ostream& out, const parallel::MeshShape& shape,
                const HardwareProfile& profile) {
  fmt::print(out, "mesh:   {} (tp fastest: a tp group is neighbouring GPUs)\n", shape.describe());
  for (int r = 0; r < shape.ranks(); ++r) {
    fmt::print(out, "  GPU {:<2} {}\n", r, coord_label(shape, r));
  }
  const int per_node = std::max(1, profile.ranks_per_node);
  const bool several_nodes = shape.ranks() > per_node;
  for (Axis axis : {Axis::tp, Axis::cp, Axis::pp, Axis::dp}) {
    if (axis == Axis::cp && shape.cp == 1) continue;
    std::map<int, std::vector<int>> groups;  // lowest member -> members
    for (int r = 0; r < shape.ranks(); ++r) {
      auto c = parallel::mesh_coords(shape, r);
      c[int(axis)] = 0;
      groups[parallel::mesh_rank(shape, c)].push_back(r);
    }
    std::vector<std::string> members;
    int crossing = 0;
    for (const auto& [first, ranks] : groups) {
      const bool crosses = ranks.front() / per_node != ranks.back() / per_node;
      crossing += crosses ? 1 : 0;
      members.push_back(fmt::format("{{{}}}{}", fmt::join(ranks, ","), crosses ? "*" : ""));
    }
    fmt::print(out, "  {} groups: {}\n", parallel::axis_name(axis), fmt::join(members, " "));
    if (axis == Axis::tp && crossing > 0)
      fmt::print(out,
                 "  {} of {} tp groups cross nodes ({} GPUs per node on {}): their 4 all-reduces "
                 "per layer ride {} instead of {}\n",
                 crossing, groups.size(), per_node, profile.name, profile.inter_node.name,
                 profile.intra_node.name);
  }
  if (several_nodes)
    fmt::print(out, "  (* crosses nodes: {} GPUs per node on {}, {} between them)\n", per_node,
               profile.name, profile.inter_node.name);
  else
    fmt::print(out, "  every group is inside one node of {} ({} GPUs per node, {})\n", profile.name,
               per_node, profile.intra_node.name);
}

// Bytes each rank put on the wire in `step`, by the axis of the group ("tp0" -> tp).
std::vector<std::map<std::string, int64_t>> sent_by_axis(const trace::Trace& trace, int step,
                                                         int ranks) {
  std::vector<std::map<std::string, int64_t>> sent(ranks);
  const trace::Interval window = trace::analyze(trace, step).window;
  for (const trace::Event& e : trace.events) {
    if (e.lane != trace::Lane::comm || e.start < window.begin || e.start >= window.end) continue;
    if (e.rank < 0 || e.rank >= ranks || e.group.size() < 2) continue;
    sent[e.rank][e.group.substr(0, 2)] += e.sent_bytes;
  }
  return sent;
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

int train_hybrid(const CommonOptions& c, const HybridLessonOptions& h, std::ostream& out) {
  auto task = make_task(c);
  const GPTConfig cfg = model_config(c, *task);
  parallel::HybridOptions options{.schedule = h.schedule,
                                  .microbatches = h.microbatches,
                                  .virtual_stages = h.virtual_stages,
                                  .zero = h.zero};
  options.mesh.tp = h.tp;
  options.mesh.pp = h.pp;
  options.mesh.cp = h.cp;
  options.mesh.dp = h.dp > 0 ? h.dp : std::max(1, c.ranks / std::max(1, h.tp * h.pp * h.cp));
  try {
    parallel::check_hybrid(cfg, options, c.ranks, c.batch);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const parallel::MeshShape& mesh = options.mesh;
  const int M = h.microbatches, P = mesh.pp, chunks = h.virtual_stages,
            micro_b = c.batch / (mesh.dp * M);
  const WorldOptions wopt = c.world_options();
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
    print_mesh(out, mesh, wopt.profile);
    fmt::print(
        out, "data:   batch {} = dp {} replicas x {} micro-batches x {} sequences of {} tokens{}\n",
        c.batch, mesh.dp, M, micro_b, c.seq,
        mesh.cp > 1 ? fmt::format(", each split zigzag over cp {} ({} tokens per GPU)", mesh.cp,
                                  c.seq / mesh.cp)
                    : "");
    fmt::print(out, "device: {}\n\ntraining {} steps ({} schedule over {} stages):\n",
               describe_world(wopt), c.steps, h.schedule, P);
  }
  World world(wopt);
  nlohmann::json config = c.to_json();
  config["dp"] = mesh.dp;
  config["tp"] = mesh.tp;
  config["pp"] = mesh.pp;
  config["cp"] = mesh.cp;
  config["schedule"] = h.schedule;
  config["microbatches"] = M;
  config["zero"] = h.zero;
  config["virtual_stages"] = h.virtual_stages;
  // Per rank, gathered to rank 0: peak bytes by memory category, then the stage's gradient bytes.
  std::vector<std::vector<int64_t>> per_rank;
  std::mutex mutex;
  LossLog log(c, out);
  train::TrainResult trained = train::train(
      world, *task, train_options(c, c.batch, cfg, config),
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        auto layout = std::make_unique<parallel::HybridLayout>(
            cfg, *ctx.comm, options, optimizer_factory(c), selected_seams().hybrid());
        return layout;
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout& layout) {
        auto& hybrid = static_cast<parallel::HybridLayout&>(layout);
        const MemoryStats mem = ctx.allocator.stats();
        std::vector<int64_t> mine(mem.peak.begin(), mem.peak.end());
        mine.push_back(mem.peak_total);
        mine.push_back(hybrid.gradient_bytes());
        mine.push_back(hybrid.stage().num_layers());
        mine.push_back(hybrid.owned_elements());
        auto all = train::gather_to_root(ctx, mine);
        std::lock_guard lock(mutex);
        if (ctx.rank == 0) per_rank = std::move(all);
      });
  print_checkpoint_lines(out, c, trained);
  nlohmann::json meta = {
      {"lesson", "hybrid"},
      {"config", config},
      {"predictions",
       {{"bubble_fraction", pipeline::bubble_fraction_theory(h.schedule, P, M, chunks)}}}};
  const trace::Trace trace = world.collect_trace(meta);
  if (!world.is_root()) return 0;  // under mpirun rank 0's process reports
  const int step = last_step(trace).value_or(0);

  // fp32: 4 B weights, 4 B gradients, momentum 4 | AdamW's m and v 8; bf16/fp16: 2 B weights,
  // fp32 gradients, and fp32 master weights beside AdamW's m and v (4 + 8).
  const bool mixed = cfg.dtype != DType::f32;
  const int weight_bytes = int(dtype_size(cfg.dtype));
  const int optimizer_bytes = (c.optimizer == "sgd" ? 4 : 8) + (mixed ? 4 : 0);

  // ---- communication per group, measured beside the formulas
  // One micro-batch's activation [B_micro, T, C] (cp: this rank's T/cp tokens): what pp sends, in
  // the model's precision; the tp all-reduces sum partial results, which bf16/fp16 sum in fp32
  // (4 B) to round once.
  const int64_t act_elems = int64_t{micro_b} * (c.seq / mesh.cp) * cfg.dim;
  const std::string tokens = mesh.cp > 1 ? "(T/cp)" : "T";
  const int64_t act = act_elems * 4, act_pp = act_elems * int64_t(dtype_size(cfg.dtype));
  auto ring = [](int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; };
  const auto sent = sent_by_axis(trace, step, mesh.ranks());
  // --recompute full reruns each block's forward in backward, g's 2 all-reduces included.
  const int tp_per_layer = c.recompute == "full" ? 6 : 4;
  fmt::print(
      out,
      "\nbytes each GPU sent in step {}, by group (measured from the trace | formula):\n"
      "  tp: {} all-reduces per layer per micro-batch{}, ring 2(t-1)/t x B_micro*{}*C*4 "
      "= {:.2f} x {}\n"
      "  pp: one activation forward + one gradient back per micro-batch and neighbour{}, "
      "B_micro*{}*C*{} = {}\n"
      "  dp: {}{}{}\n",
      step + 1, tp_per_layer,
      c.recompute == "full" ? " (2 fwd + 2 recomputed fwd + 2 bwd)" : " (2 fwd + 2 bwd)", tokens,
      ring(mesh.tp), format_bytes(act),
      chunks > 1 ? fmt::format(" and chunk ({} chunks per stage: a micro-batch passes "
                               "every stage {} times)",
                               chunks, chunks)
                 : "",
      tokens, dtype_size(cfg.dtype), format_bytes(act_pp),
      h.zero == 1 ? fmt::format("ZeRO-1: ring reduce-scatter of the stage's fp32 gradients + "
                                "all-gather of its {} B parameters once per step, (d-1)/d = {:.2f} "
                                "x (gradient + parameter bytes)",
                                weight_bytes, ring(mesh.dp) / 2)
                  : fmt::format("ring all-reduce of the stage's gradients once per step, "
                                "2(d-1)/d = {:.2f} x gradient bytes",
                                ring(mesh.dp)),
      mesh.cp == 1
          ? std::string()
          : fmt::format("\n  cp: ring attention per layer and micro-batch: K|V blocks "
                        "B_micro*(T/cp)*2C/t, cp-1 hops forward ({}) and backward in {} B, cp "
                        "dK|dV hops in 4 B (fp32 accumulators); then 2(c-1)/c = {:.2f} x "
                        "gradient bytes (the cp all-reduce)",
                        c.recompute == "none" ? "once" : "twice: recompute reruns it", weight_bytes,
                        ring(mesh.cp)),
      c.precision == "fp16" ? "\n  (fp16: every group also all-reduces the loss scaler's "
                              "found-inf flag, 4 B, once per step)"
                            : "");
  for (int r = 0; r < mesh.ranks(); ++r) {
    const auto coord = parallel::mesh_coords(mesh, r);
    const int s = coord[int(Axis::pp)];
    const int64_t layers = per_rank[r][kNumMemCategories + 2];
    const double tp_formula = ring(mesh.tp) * tp_per_layer * layers * M * act;
    // Chunk c of stage s is virtual stage cP+s: it sends its output on unless it is the last,
    // and its input gradient back unless it is the first.
    int64_t sends = 0;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int virtual_stage = chunk * P + s;
      sends += (virtual_stage < P * chunks - 1 ? 1 : 0) + (virtual_stage > 0 ? 1 : 0);
    }
    const int64_t pp_formula = int64_t{M} * act_pp * sends;
    const int64_t grad_bytes = per_rank[r][kNumMemCategories + 1];
    // ZeRO-1: reduce-scatter the fp32 gradients, all-gather the parameters in the model's type
    const double dp_formula = h.zero == 1
                                  ? ring(mesh.dp) / 2 * (grad_bytes + grad_bytes / 4 * weight_bytes)
                                  : ring(mesh.dp) * grad_bytes;
    auto get = [&](const char* axis) {
      auto it = sent[r].find(axis);
      return it == sent[r].end() ? int64_t{0} : it->second;
    };
    // cp: per layer and micro-batch the ring's K|V blocks B_micro*(T/cp)*2C/t (cp-1 hops
    // forward, again in every recomputed forward, cp-1 backward, in the activations' type) and
    // the dK|dV accumulators (cp hops, fp32); then the gradients' all-reduce over cp.
    const int64_t kv = int64_t{micro_b} * (c.seq / mesh.cp) * 2 * cfg.dim / mesh.tp;
    const int kv_hops = (mesh.cp - 1) * (c.recompute == "none" ? 2 : 3);
    const double cp_formula =
        mesh.cp == 1
            ? 0.0
            : double(layers) * M * (double(kv_hops) * kv * weight_bytes + mesh.cp * kv * 4.0) +
                  ring(mesh.cp) * grad_bytes;
    fmt::print(out, "  GPU {:<2} {}  tp {:>9} | {:>9}   pp {:>9} | {:>9}   dp {:>9} | {:>9}{}\n", r,
               coord_label(mesh, r), format_bytes(get("tp")),
               format_bytes(int64_t(tp_formula + 0.5)), format_bytes(get("pp")),
               format_bytes(pp_formula), format_bytes(get("dp")),
               format_bytes(int64_t(dp_formula + 0.5)),
               mesh.cp == 1 ? std::string()
                            : fmt::format("   cp {:>9} | {:>9}", format_bytes(get("cp")),
                                          format_bytes(int64_t(cp_formula + 0.5))));
  }

  // ---- the pipeline bubble
  const std::vector<double> bubble = measured_bubble_fractions(trace, step);
  const double theory = pipeline::bubble_fraction_theory(h.schedule, P, M, chunks);
  fmt::print(out, "\nbubble per GPU, step {} (idle / step time), theory {} = {}:\n", step + 1,
             pipeline::bubble_formula(h.schedule, P, M, chunks), percent(theory));
  fmt::print(out,
             "  (measured by {}; the formula assumes equal stages that never wait for\n"
             "   communication: here stage 0 also embeds, stage {} computes the loss, and the tp\n"
             "   all-reduces and the dp all-reduce take time too)\n",
             bubble_accounting_credit(), P - 1);
  for (int r = 0; r < mesh.ranks() && r < int(bubble.size()); ++r)
    fmt::print(out, "  GPU {:<2} {:>6}\n", r, percent(bubble[r]));

  // ---- memory per rank
  fmt::print(out,
             "\npeak memory per GPU by category (allocator, after building the model):\n  {:<14}",
             "GPU");
  for (int k = 0; k < kNumMemCategories; ++k)
    fmt::print(out, "{:>16}", category_name(static_cast<MemCategory>(k)));
  fmt::print(out, "{:>16}\n", "total");
  for (int r = 0; r < mesh.ranks(); ++r) {
    fmt::print(out, "  {:<14}", fmt::format("{} {}", r, coord_label(mesh, r)));
    for (int k = 0; k <= kNumMemCategories; ++k)
      fmt::print(out, "{:>16}", format_bytes(per_rank[r][k]));
    fmt::print(out, "\n");
  }
  // The model states by formula: stage s holds its layers' tp slices and replicated parts, plus
  // the embeddings (stage 0) and the head (the last stage).
  const int64_t C = cfg.dim, V = cfg.vocab, T = cfg.seq_len, t = mesh.tp;
  fmt::print(out,
             "model states by formula: P_s = [s=0](V+T)C + L_s(6C + (12C^2+7C)/t) + "
             "[s=P-1](V+2)C parameters, x {} B weights ({}), 4 B gradients, {} B {} state{}{}:\n",
             weight_bytes, c.precision, optimizer_bytes, c.optimizer,
             mixed ? " (fp32 master 4 + m 4 + v 4)" : "",
             h.zero != 1 ? std::string()
             : mesh.dp == 1
                 ? std::string(" / d (ZeRO-1 over dp 1 shards nothing: this rank "
                               "owns every chunk)")
                 : fmt::format(" / d (ZeRO-1: each of the {} dp ranks keeps its chunk)", mesh.dp));
  const pipeline::LayerPartition layers = pipeline::partition_layers(cfg.layers, P);
  for (int s = 0; s < P; ++s) {
    const int64_t L = layers.ranges[s].second - layers.ranges[s].first;
    const int64_t params = (s == 0 ? (V + T) * C : 0) + L * (6 * C + (12 * C * C + 7 * C) / t) +
                           (s == P - 1 ? (V + 2) * C : 0);
    fmt::print(out, "  stage {}: P_{} = {} -> {} + {} + {}\n", s, s, with_commas(params),
               format_bytes(weight_bytes * params), format_bytes(4 * params),
               format_bytes(optimizer_bytes * params / (h.zero == 1 ? mesh.dp : 1)));
  }
  fmt::print(out, "\n");
  return finish_run(c, trace, "hybrid", out);
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
        ->check(Positive);
    app.add_option("--tp", options_.tp, "tensor-parallel ranks per stage")
        ->check(Positive)
        ->capture_default_str();
    app.add_option("--pp", options_.pp, "pipeline stages")->check(Positive)->capture_default_str();
    app.add_option("--schedule", options_.schedule,
                   "gpipe | 1f1b | interleaved | zb-h1 | zbv | dualpipev")
        ->capture_default_str();
    app.add_option("--virtual-stages", options_.virtual_stages,
                   "interleaved: layer chunks per stage (V); pp x V must divide the layers")
        ->check(Positive)
        ->capture_default_str();
    app.add_option("--microbatches", options_.microbatches, "micro-batches per replica (M)")
        ->check(Positive)
        ->capture_default_str();
    app.add_option("--cp", options_.cp,
                   "context-parallel ranks per stage: every sequence split zigzag over them, "
                   "ring attention (--seq must split into 2 x cp chunks)")
        ->check(Positive)
        ->capture_default_str();
    app.add_option("--zero", options_.zero,
                   "0: gradients all-reduced over dp | 1: ZeRO-1 over dp (each dp rank keeps "
                   "optimizer state and fp32 masters for 1/dp of its stage; with dp 1 a no-op)")
        ->capture_default_str();
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== hybrid: dp x tp x pp{} over {} GPUs ==\n", options_.cp > 1 ? " x cp" : "",
               c.ranks);
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

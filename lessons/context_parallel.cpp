// Lesson 9 — context parallelism. Long sequences are where attention's memory grows with T^2:
// split every sequence over cp GPUs and each holds T/cp of its tokens through the whole model.
// Ring attention passes the K/V blocks round the ring (cp-1 hops, hidden behind the attention on
// the block in hand), merging partial results with the online-softmax rule; zigzag balances the
// causal work that contiguous chunks leave on the last rank; Ulysses swaps sequence for heads with
// two all-to-alls; chunked attends only within each rank's chunk and learns a worse model. The
// lesson measures each from the trace (busy/idle, wire bytes) and the allocator (activations).
#include "lessons/context_parallel.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <CLI/CLI.hpp>

#include "core/parallel/context_parallel.h"
#include "core/parallel/mesh.h"
#include "core/tensor/dtype.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

// The cp layout together with the mesh it takes its group from (the group must outlive it).
class MeshLayout : public parallel::ContextParallel {
 public:
  MeshLayout(std::shared_ptr<parallel::Mesh> mesh, const GPTConfig& cfg, parallel::CpLayout layout,
             int seq, const train::OptimizerFactory& make_optimizer)
      : ContextParallel(cfg, mesh->group(parallel::Axis::cp), layout, seq, make_optimizer,
                        ex::selected_seams().cp),
        mesh_(std::move(mesh)) {}

 private:
  std::shared_ptr<parallel::Mesh> mesh_;
};

parallel::CpLayout layout_of(const std::string& name) {
  try {
    return parallel::parse_cp_layout(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// What this run can do, checked before any rank starts (one line, exit 2).
void check_run(const CommonOptions& c, const GPTConfig& cfg, parallel::CpLayout layout) {
  try {
    parallel::check_cp_size(cfg, c.seq, c.ranks, layout);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

// ---- the run -------------------------------------------------------------------------------

ContextParallelResult train_context_parallel(const CommonOptions& c, const std::string& layout_name,
                                             std::ostream& out) {
  const parallel::CpLayout layout = layout_of(layout_name);
  WorldOptions wopt = c.world_options();
  auto task = make_task(c);
  const GPTConfig cfg = model_config(c, *task);
  check_run(c, cfg, layout);
  World world(wopt);
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
    const std::vector<int32_t> r0 = parallel::cp_positions(c.seq, c.ranks, 0, layout);
    fmt::print(out, "split:  cp={} {}: each GPU holds {} of the {} tokens of every sequence{}\n",
               c.ranks, layout_name, r0.size(), c.seq,
               layout == parallel::CpLayout::zigzag
                   ? fmt::format(" (rank 0: positions {}..{} and {}..{})", r0.front(),
                                 r0[r0.size() / 2 - 1], r0[r0.size() / 2], r0.back())
                   : "");
    fmt::print(out, "data:   {} task, {} sequences x {} tokens per step\n", task->name(), c.batch,
               c.seq);
    fmt::print(out, "device: {}\n", describe_world(wopt));
    fmt::print(out, "optim:  {} lr {}\n\n", c.optimizer, c.lr);
  }
  ContextParallelResult result;
  LossLog log(c, out);
  train::TrainResult trained = train::train(
      world, *task, train_options(c, c.batch, cfg),
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        auto mesh = std::make_shared<parallel::Mesh>(*ctx.comm, parallel::MeshShape{.cp = c.ranks});
        auto made = std::make_unique<MeshLayout>(mesh, cfg, layout, c.seq, optimizer_factory(c));
        return made;
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout&) {
        const int64_t peak = ctx.allocator.stats().peak[static_cast<int>(MemCategory::activations)];
        auto all = train::gather_to_root(ctx, {peak});
        if (ctx.rank == 0)
          for (const auto& v : all) result.peak_activations.push_back(v.at(0));
      });
  result.losses = trained.losses;
  if (trained.first_step > 0 || trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, trained);
  nlohmann::json meta = {
      {"lesson", "context_parallel"}, {"cp_layout", layout_name}, {"config", c.to_json()}};
  meta["config"]["cp"] = c.ranks;  // the mesh axis: the dashboard labels rows "GPU 1  cp1"
  result.trace = world.collect_trace(meta);
  result.under_mpi = world.is_mpi();
  return result;
}

// ---- the report ----------------------------------------------------------------------------

namespace {

// A quiet copy of the options for a side run (no files, no resume).
CommonOptions side_run(const CommonOptions& c) {
  CommonOptions o = c;
  o.quiet = true;
  o.checkpoint.clear();
  o.resume.clear();
  o.trace_path.clear();
  o.viz = false;
  return o;
}

void print_balance(std::ostream& out, const trace::Trace& trace) {
  const trace::TraceSummary s = trace::analyze(trace, last_step(trace));
  double lo = 1e300, hi = 0;
  fmt::print(out, "\nper GPU, last step (measured from the trace):\n");
  fmt::print(out, "  {:<5} {:>10} {:>10} {:>10} {:>10}\n", "rank", "busy", "idle", "comm wire",
             "comm wait");
  for (const trace::RankSummary& r : s.ranks) {
    fmt::print(out, "  {:<5} {:>10} {:>10} {:>10} {:>10}\n", r.rank, format_seconds(r.busy),
               format_seconds(r.idle), format_seconds(r.comm_wire), format_seconds(r.comm_wait));
    lo = std::min(lo, r.busy);
    hi = std::max(hi, r.busy);
  }
  fmt::print(out, "  busy spread: the busiest GPU works {:.2f}x the least busy one\n",
             lo > 0 ? hi / lo : 0.0);
}

void print_wire(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                parallel::CpLayout layout, const trace::Trace& trace) {
  const trace::Interval window = trace::analyze(trace, last_step(trace)).window;
  std::vector<int64_t> attention(size_t(trace.num_ranks), 0), gradients(size_t(trace.num_ranks), 0);
  for (const trace::Event& e : trace.events) {
    if (e.lane != trace::Lane::comm || e.start < window.begin || e.start >= window.end) continue;
    auto& bucket = e.op == "all_reduce" ? gradients : attention;
    bucket[size_t(e.rank)] += e.sent_bytes;
  }
  const int cp = c.ranks;
  const int64_t tl = c.seq / cp, b = c.batch, ch = cfg.dim, layers = cfg.layers;
  // K|V blocks travel in the activations' dtype (e bytes); the dK|dV accumulators stay fp32 under
  // mixed precision (every hop adds to them: context_parallel.cpp), so 4 bytes.
  const int64_t e = dtype_size(cfg.dtype);
  const int64_t kv = b * tl * 2 * ch * 4;  // one K|V block, fp32
  int64_t formula = 0;
  std::string how;
  switch (layout) {
    case parallel::CpLayout::contiguous:
    case parallel::CpLayout::zigzag:
      if (e == 4) {
        formula = layers * (3 * int64_t{cp} - 2) * kv;
        how = fmt::format(
            "{} layers x ({} K|V hops forward + {} backward + {} dK|dV hops) x B*(T/cp)*2C*4 = {} "
            "x {}*{}*{}*4",
            layers, cp - 1, cp - 1, cp, layers * (3 * cp - 2), b, tl, 2 * ch);
      } else {
        formula = layers * (2 * (int64_t{cp} - 1) * kv / 4 * e + int64_t{cp} * kv);
        how = fmt::format(
            "{} layers x B*(T/cp)*2C x ({} K|V hops forward + {} backward) x {} B ({}) + {} dK|dV "
            "hops x 4 B (fp32 accumulators)",
            layers, cp - 1, cp - 1, e, precision_name(cfg.dtype), cp);
      }
      break;
    case parallel::CpLayout::ulysses:
      // the all-to-alls re-shard activations and their gradients: e bytes each
      formula = layers * 11 * b * tl * ch * e * (cp - 1) / cp;
      how = fmt::format(
          "{} layers x 11 all-to-alls' worth of B*(T/cp)*C (qkv 3 + out 1 forward; qkv 3 + dout 1 "
          "+ "
          "dqkv 3 backward) x (cp-1)/cp",
          layers);
      break;
    case parallel::CpLayout::chunked:
      how = "chunked attention never communicates";
      break;
  }
  fmt::print(out, "\nbytes on the wire per GPU, last step (measured: trace sent_bytes):\n");
  for (int r = 0; r < trace.num_ranks; ++r)
    fmt::print(out, "  rank {}: attention {:>10}   gradient all-reduce {:>10}\n", r,
               format_bytes(attention[size_t(r)]), format_bytes(gradients[size_t(r)]));
  fmt::print(out, "  attention formula: {} = {}\n", how, format_bytes(formula));
  fmt::print(
      out,
      "  gradients formula: ring all-reduce 2(cp-1)/cp x {} params x 4 B = {} (every GPU "
      "holds all weights)\n",
      with_commas(count_params(cfg)),
      format_bytes(int64_t(theory::ring_all_reduce_factor(cp) * double(count_params(cfg)) * 4.0)));
}

// Activation bytes this model keeps per GPU (fp32, --recompute none): per token and layer the 16C
// values + 4 statistics of the block, plus embedding, head and logits; per layer the score rows.
int64_t activation_formula(const GPTConfig& cfg, int64_t b, int64_t t, int cp,
                           parallel::CpLayout layout) {
  const int64_t tl = t / cp, ch = cfg.dim, h = cfg.heads, l = cfg.layers, v = cfg.vocab;
  const bool whole_rows = cp > 1 && layout != parallel::CpLayout::chunked;
  const int64_t per_token = ch + l * (16 * ch + 4) + ch + 2 + 2 * v;
  const int64_t scores = l * b * h * tl * (whole_rows ? t : tl);
  const int64_t lse =
      cp > 1 && layout != parallel::CpLayout::ulysses && layout != parallel::CpLayout::chunked
          ? l * b * h * tl
          : 0;
  // Mixed precision: the activations and scores in their e bytes, the layernorm statistics (4 per
  // token and layer, 2 in the head) and log-sum-exps in fp32.
  const int64_t e = dtype_size(cfg.dtype), fp32_per_token = l * 4 + 2;
  return e * (b * tl * (per_token - fp32_per_token) + scores) + 4 * (b * tl * fp32_per_token + lse);
}

void print_memory_vs_seq(std::ostream& out, const CommonOptions& c, parallel::CpLayout layout,
                         const std::string& layout_name) {
  fmt::print(out,
             "\nactivation memory per GPU vs sequence length ({}; one phantom step each, "
             "measured by the allocator / formula):\n",
             layout_name);
  fmt::print(out, "  {:>6} {:>23} {:>23} {:>23}   T^2 part at cp=1\n", "T", "cp=1", "cp=2", "cp=4");
  for (int t : {c.seq, 2 * c.seq, 4 * c.seq}) {
    std::string row = fmt::format("  {:>6}", t);
    GPTConfig cfg1;
    for (int cp : {1, 2, 4}) {
      CommonOptions probe = side_run(c);
      probe.ranks = cp;
      probe.seq = t;
      probe.steps = 1;
      probe.device = "phantom";
      probe.clock = "modeled";
      probe.capacity.clear();
      auto task = make_task(probe);
      const GPTConfig cfg = model_config(probe, *task);
      if (cp == 1) cfg1 = cfg;
      try {
        parallel::check_cp_size(cfg, t, cp, layout);
      } catch (const std::invalid_argument&) {
        row += fmt::format(" {:>23}", "(does not split)");
        continue;
      }
      std::ostringstream ignored;
      const ContextParallelResult r = train_context_parallel(probe, layout_name, ignored);
      row += fmt::format(
          " {:>23}", fmt::format("{} / {}", format_bytes(r.peak_activations.at(0)),
                                 format_bytes(activation_formula(cfg, c.batch, t, cp, layout))));
    }
    row += fmt::format(
        "   {}", format_bytes(int64_t{4} * cfg1.layers * c.batch * cfg1.heads * int64_t{t} * t));
    fmt::print(out, "{}\n", row);
  }
  const char* rows = layout == parallel::CpLayout::chunked ? "(T/cp)" : "T";
  const bool lse = layout == parallel::CpLayout::contiguous || layout == parallel::CpLayout::zigzag;
  if (c.precision == "fp32")
    fmt::print(out,
               "  formula: 4 B x [B*(T/cp)*(2C + L*(16C+4) + 2 + 2V) + L*B*H*(T/cp)*{}{}]: each "
               "GPU keeps its T/cp rows of the T x T score matrix, so the T^2 part shrinks by cp\n",
               rows, lse ? " + L*B*H*(T/cp) (log-sum-exps)" : "");
  else
    fmt::print(out,
               "  formula: 2 B x [B*(T/cp)*(2C + L*16C + 2V) + L*B*H*(T/cp)*{}] ({}) + 4 B x "
               "[B*(T/cp)*(4L + 2) (layernorm statistics){}] (fp32): each GPU keeps its T/cp rows "
               "of the T x T score matrix, so the T^2 part shrinks by cp\n",
               rows, c.precision, lse ? " + L*B*H*(T/cp) (log-sum-exps)" : "");
}

void print_exactness(std::ostream& out, const CommonOptions& c, parallel::CpLayout layout,
                     const std::vector<float>& losses) {
  if (losses.empty()) return;
  const bool chunked = layout == parallel::CpLayout::chunked;
  const std::string other = chunked ? "zigzag" : "chunked";
  CommonOptions o = side_run(c);
  std::ostringstream ignored;
  const ContextParallelResult r = train_context_parallel(o, other, ignored);
  if (r.losses.empty()) return;
  const float exact = chunked ? r.losses.back() : losses.back();
  const float naive = chunked ? losses.back() : r.losses.back();
  fmt::print(out,
             "\nexact vs naive (same seed, data and steps, {} task): final loss {:.4f} with {}, "
             "{:.4f} with chunked attention\n",
             c.task, exact, chunked ? "zigzag ring attention" : parallel::cp_layout_name(layout),
             naive);
  if (naive > exact + 0.01f)  // more than the wobble of one run
    fmt::print(
        out,
        "  chunked attention cannot see tokens in other GPUs' chunks: it learns a different, "
        "worse model (+{:.4f})\n",
        naive - exact);
  else
    fmt::print(
        out,
        "  chunked is not worse here: {} does not need tokens from other chunks within {} "
        "steps (try --task reverse --batch 16 --steps 300: the answers lie in other chunks)\n",
        c.task, c.steps);
}

class ContextParallelLesson : public Lesson {
 public:
  std::string name() const override { return "context_parallel"; }
  std::string summary() const override {
    return "ring attention (contiguous/zigzag), Ulysses all-to-all, naive chunks: T/cp tokens per "
           "GPU";
  }
  LessonDefaults defaults() const override { return {.ranks = 2, .steps = 40, .batch = 8}; }

  void add_options(CLI::App& app) override {
    ranks_option_ = app.get_option_no_throw("--ranks");
    app.add_option("--cp", cp_, "context-parallel ranks (default: --ranks)")
        ->check(AtLeastOne("rank"));
    app.add_option("--cp-layout", layout_, "contiguous, zigzag, ulysses or chunked")
        ->capture_default_str();
    app.add_option("--compare", compare_,
                   "on: also measure activation memory for cp = 1, 2, 4 and train the "
                   "exact/naive counterpart")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
  }

  int run(const CommonOptions& given, std::ostream& out) override {
    CommonOptions c = given;
    if (cp_ > 0) {
      const bool ranks_typed = ranks_option_ && ranks_option_->count() > 0;
      if ((ranks_typed || launched_by_mpi()) && c.ranks != cp_)
        throw UsageError(fmt::format(
            "--cp {} but the run has {} ranks (all of them form the cp group): drop --ranks or "
            "make it {}{}",
            cp_, c.ranks, cp_, launched_by_mpi() ? fmt::format(" (mpirun -n {})", cp_) : ""));
      c.ranks = cp_;
    }
    const parallel::CpLayout layout = layout_of(layout_);
    fmt::print(out, "== context_parallel: every sequence split over {} GPUs ({}) ==\n", c.ranks,
               layout_);
    ContextParallelResult r = train_context_parallel(c, layout_, out);
    print_loss_summary(out, c, r.losses,
                       " (the mean over all B*T tokens: each GPU's share averaged)");
    auto task = make_task(c);
    const GPTConfig cfg = model_config(c, *task);
    print_balance(out, r.trace);
    print_wire(out, c, cfg, layout, r.trace);
    if (!r.peak_activations.empty())
      fmt::print(
          out, "\npeak activations per GPU (allocator): {}   formula {}\n",
          format_bytes(*std::max_element(r.peak_activations.begin(), r.peak_activations.end())),
          format_bytes(activation_formula(cfg, c.batch, c.seq, c.ranks, layout)));
    if (compare_ == "on" && r.under_mpi) {
      fmt::print(out,
                 "\n(under mpirun the world size is fixed: run without mpirun for the cp = 1, 2, 4 "
                 "memory table and the exact-vs-chunked comparison)\n");
    } else if (compare_ == "on") {
      print_memory_vs_seq(out, c, layout, layout_);
      print_exactness(out, c, layout, r.losses);
    }
    return finish_run(c, r.trace, name(), out);
  }

 private:
  CLI::Option* ranks_option_ = nullptr;
  int cp_ = 0;
  std::string layout_ = "zigzag";
  std::string compare_ = "on";
};

}  // namespace

std::unique_ptr<Lesson> make_context_parallel_lesson() {
  return std::make_unique<ContextParallelLesson>();
}

}  // namespace mgpu::lessons

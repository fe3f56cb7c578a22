// Lesson 18 — the fault lab. Real training is shaped by faults: Llama 3's 54-day pre-training
// had 466 job interruptions (Dubey et al. 2024, 3.3.4); MegaScale (Jiang et al. 2024) is built
// around finding stragglers and restarting fast. Each act injects one fault
// (core/runtime/faults.h) into an otherwise identical run and prints what it cost beside the
// formula: a straggler in DDP, in a pipeline and in ZeRO-3, a slow link in a ring and a tree;
// then survival (faults_survival.cpp): a lost rank, the resume, the checkpoint interval.
#include "lessons/faults.h"

#include <algorithm>
#include <numeric>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/comm/cost_model.h"
#include "core/runtime/faults.h"
#include "core/tensor/tensor.h"
#include "core/theory/schedule_kind.h"
#include "lessons/ddp.h"
#include "lessons/pipeline.h"
#include "lessons/training.h"
#include "lessons/zero.h"

namespace mgpu::lessons {

namespace {

// The options of an act's run: fault_free, with only the faults the act names.
CommonOptions act_options(const CommonOptions& c, std::vector<std::string> slow_rank = {},
                          std::vector<std::string> slow_link = {}) {
  CommonOptions a = fault_free(c);
  a.slow_rank = std::move(slow_rank);
  a.slow_link = std::move(slow_link);
  return a;
}

double mean_without(const std::vector<double>& v, int skip) {
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (static_cast<int>(i) != skip) sum += v[i];
  return v.size() > 1 ? sum / static_cast<double>(v.size() - 1) : 0;
}

void print_straggler_table(std::ostream& out, const StragglerEffect& e) {
  fmt::print(out,
             "  rank  busy (no fault -> straggler)     waiting in comm (no fault -> straggler)\n");
  for (size_t r = 0; r < e.busy_base.size(); ++r)
    fmt::print(out, "  {:>4}  {:>10} -> {:<10}{:>8}  {:>10} -> {:<10}\n", r,
               format_seconds(e.busy_base[r]), format_seconds(e.busy_slow[r]),
               static_cast<int>(r) == e.straggler ? "<- slow" : "", format_seconds(e.wait_base[r]),
               format_seconds(e.wait_slow[r]));
  fmt::print(out, "  step {} -> {}\n", format_seconds(e.step_base), format_seconds(e.step_slow));
}

// Act 1: DDP. Every rank all-reduces every bucket, so nobody finishes before the slowest.
void act_ddp(std::ostream& out, const CommonOptions& c, const SlowRank& s) {
  const std::string text = fmt::format("{}:{:g}", s.rank, s.factor);
  DataParallelOptions d;
  d.log_losses = false;
  d.overlap = false;  // one all-reduce per tensor after backward: the wait is in one place
  const DataParallelResult base = train_data_parallel(act_options(c), d, out);
  const DataParallelResult slow = train_data_parallel(act_options(c, {text}), d, out);
  const StragglerEffect e = straggler_effect(base.trace, slow.trace, c.steps - 1, s.rank);
  fmt::print(out, "\n1. a straggler in DDP: --slow-rank {} ({} ranks, --overlap off, last step)\n",
             text, c.ranks);
  print_straggler_table(out, e);
  const WorldOptions w = c.world_options();
  const LinkSpec& link = w.profile.link(0, 1);
  fmt::print(out,
             "  straggler's excess   busy(rank {}) - mean busy(others)             = {}\n"
             "  the step grows by    step(straggler) - step(none)                  = {}\n"
             "  the others wait      mean waiting(others), straggler - none        = {}\n"
             "  (every all-reduce needs rank {}'s gradient: the others wait its excess, less "
             "the one ring\n   message each sends before it arrives, alpha {} + a chunk over "
             "{})\n",
             s.rank, format_seconds(e.excess()), format_seconds(e.step_slow - e.step_base),
             format_seconds(e.others_wait()), s.rank, format_seconds(link.latency), link.name);
}

// Act 2: a pipeline in theory mode (F 1 ms, B 2 ms per stage): the slow stage paces every
// micro-batch; its neighbours idle where it used to.
void act_pipeline(std::ostream& out, const CommonOptions& c, const SlowRank& s) {
  const std::string text = fmt::format("{}:{:g}", s.rank, s.factor);
  PipelineOptions p;
  p.schedule = theory::schedule_name(theory::ScheduleKind::gpipe);
  p.theory = true;
  p.microbatches = 4;
  CommonOptions pc = c;
  pc.layers = std::max(c.layers, c.ranks);  // a block per stage at least
  const PipelineResult base = train_pipeline(act_options(pc), p, out);
  const PipelineResult slow = train_pipeline(act_options(pc, {text}), p, out);
  const int m = p.microbatches;
  const double fb = 3e-3;  // F + B per stage and micro-batch in theory mode
  fmt::print(out,
             "\n2. a straggler in a pipeline: --slow-rank {}, GPipe, {} stages, {} "
             "micro-batches (theory mode: F 1 ms, B 2 ms)\n",
             text, c.ranks, m);
  fmt::print(out, "  stage  bubble (no fault -> straggler)\n");
  for (size_t r = 0; r < base.measured_bubble.size(); ++r)
    fmt::print(out, "  {:>5}  {:5.1f}% -> {:5.1f}%{}\n", r, 100 * base.measured_bubble[r],
               100 * slow.measured_bubble[r], static_cast<int>(r) == s.rank ? "  <- slow" : "");
  const double predicted = base.measured_step_seconds + m * (s.factor - 1) * fb;
  fmt::print(out,
             "  step {} -> {}; the slow stage passes each of the M micro-batches at F x (F+B):\n"
             "  step + M (F-1)(F+B) = {} + {} x {:g} x {} = {}\n",
             format_seconds(base.measured_step_seconds), format_seconds(slow.measured_step_seconds),
             format_seconds(base.measured_step_seconds), m, s.factor - 1, format_seconds(fb),
             format_seconds(predicted));
}

// Act 3: ZeRO-3. Each layer's parameters are all-gathered before use: the gathers wait for
// the slow rank's turn.
void act_zero(std::ostream& out, const CommonOptions& c, const SlowRank& s) {
  const std::string text = fmt::format("{}:{:g}", s.rank, s.factor);
  parallel::ZeroOptions z;
  z.stage = 3;
  const ZeroRunResult base = train_zero(act_options(c), z, out);
  const ZeroRunResult slow = train_zero(act_options(c, {text}), z, out);
  const StragglerEffect e = straggler_effect(base.trace, slow.trace, c.steps - 1, s.rank);
  fmt::print(out,
             "\n3. a straggler in ZeRO-3: --slow-rank {} (every layer's all-gather and "
             "reduce-scatter waits for it)\n",
             text);
  print_straggler_table(out, e);
  fmt::print(out,
             "  straggler's excess before its optimizer {}; the others' added waiting {}, spread "
             "over the\n  gathers of every layer (and the next step's first gathers wait for its "
             "optimizer)\n",
             format_seconds(e.excess()), format_seconds(e.others_wait()));
}

// Act 4: a slow link. A ring all-reduce sends every chunk over every link of the ring in
// lock-step, so one slow link paces all 2(N-1) steps; a binomial tree crosses only some links.
void act_link(std::ostream& out, const CommonOptions& c, const SlowLink& l) {
  const std::string text = fmt::format("{}-{}:{:g}", l.a, l.b, l.factor);
  constexpr int64_t bytes = 64 << 20;
  const double n = c.ranks;
  const double ring_base = timed_ring_all_reduce(act_options(c), bytes);
  const double ring_slow = timed_ring_all_reduce(act_options(c, {}, {text}), bytes);
  const WorldOptions w = act_options(c, {}, {text}).world_options();
  const LinkSpec& link = w.profile.link(l.a, l.b);
  const double alpha = link.latency, beta = link.achieved_bandwidth();
  const double formula = 2 * (n - 1) * (alpha + bytes / n * l.factor / beta);
  std::vector<int> members(static_cast<size_t>(c.ranks));
  std::iota(members.begin(), members.end(), 0);
  HardwareProfile healthy = w.profile;
  healthy.faults = {};
  const double tree_base = 2 * comm::tree_broadcast_time(members, 0, bytes, healthy);
  const double tree_slow = 2 * comm::tree_broadcast_time(members, 0, bytes, w.profile);
  fmt::print(out, "\n4. a slow link: --slow-link {} ({}, {} ranks, all-reduce of {} MiB)\n", text,
             link.name, c.ranks, bytes >> 20);
  fmt::print(out,
             "  ring, measured       {} -> {} ({:.2f}x)\n"
             "  ring, alpha-beta     2(N-1)(alpha + (n/N) F / beta) = 2 x {} x ({} + {} MiB x "
             "{:g} / {:.0f} GB/s) = {}\n"
             "  tree, cost model     2 x binomial broadcast = {} -> {} ({:.2f}x)\n",
             format_seconds(ring_base), format_seconds(ring_slow), ring_slow / ring_base,
             c.ranks - 1, format_seconds(alpha), bytes / n / (1 << 20), l.factor, beta / 1e9,
             format_seconds(formula), format_seconds(tree_base), format_seconds(tree_slow),
             tree_slow / tree_base);
}

class FaultsLesson : public Lesson {
 public:
  std::string name() const override { return "faults"; }
  std::string summary() const override {
    return "the fault lab: stragglers, slow links, lost ranks, the checkpoint interval";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .steps = 8, .batch = 16}; }
  void add_options(CLI::App& app) override {
    app.add_option("--checkpoint-cost", checkpoint_cost_,
                   "seconds one checkpoint of the large job costs (the interval sweep)")
        ->check(CLI::PositiveNumber);
    app.add_option("--mtbf-hours", mtbf_hours_,
                   "the large job's mean time between failures (default: Llama 3's 54 days / "
                   "419 unexpected interruptions)")
        ->check(CLI::PositiveNumber);
  }

  int run(const CommonOptions& c, std::ostream& out) override {
    if (c.ranks < 3)
      throw UsageError(
          "the fault lab needs --ranks 3 or more (a ring and a straggler among several)");
    // Honoured or refused: the lab's runs are its own, compared side by side.
    if (!c.trace_path.empty() || !c.checkpoint.empty() || !c.resume.empty() ||
        c.checkpoint_every > 0)
      throw UsageError(
          "the fault lab runs several runs of its own and writes no trace or checkpoint: give "
          "--trace, --checkpoint or --resume to a training lesson with the fault options, e.g. "
          "mgpu run ddp --slow-rank 1:2 --trace slow.json");
    const CommonOptions defaults;
    if (c.seed != defaults.seed || c.weight_decay != defaults.weight_decay || !c.jitter.empty() ||
        c.log_every != defaults.log_every || c.quiet)
      throw UsageError(
          "the fault lab prints modeled times, which --seed, --weight-decay, --jitter, --log-every "
          "and --quiet do not change: leave them out, or give them to a training lesson with the "
          "fault options");
    CommonOptions lab = c;
    if (lab.slow_rank.empty()) lab.slow_rank = {"1:2"};
    if (lab.slow_link.empty()) lab.slow_link = {"1-2:4"};
    if (lab.fail_rank.empty()) lab.fail_rank = fmt::format("1@{}", c.steps - 2);
    const FaultPlan plan = lab.fault_plan();  // throws UsageError for impossible values
    fmt::print(out, "== faults: what a straggler, a slow link and a lost rank cost ==\n");
    fmt::print(out, "world: {}\n", describe_world(act_options(c).world_options()));
    act_ddp(out, lab, plan.slow_ranks.front());
    act_pipeline(out, lab, plan.slow_ranks.front());
    act_zero(out, lab, plan.slow_ranks.front());
    act_link(out, lab, plan.slow_links.front());
    const int code = print_survival(lab, out);
    print_checkpoint_interval(out, checkpoint_cost_, mtbf_hours_);
    return code;
  }

 private:
  double checkpoint_cost_ = 60;
  double mtbf_hours_ = 54.0 * 24 / 419;
};

}  // namespace

CommonOptions fault_free(const CommonOptions& c) {
  CommonOptions a = c;
  a.quiet = true;
  a.viz = false;
  a.trace_path.clear();
  a.checkpoint.clear();
  a.resume.clear();
  a.checkpoint_every = 0;
  a.slow_rank.clear();
  a.slow_link.clear();
  a.jitter.clear();
  a.fail_rank.clear();
  return a;
}

double StragglerEffect::excess() const {
  return busy_slow.at(straggler) - mean_without(busy_slow, straggler);
}

double StragglerEffect::others_wait() const {
  return mean_without(wait_slow, straggler) - mean_without(wait_base, straggler);
}

namespace {

// Rank r's summary within its own window of `step` (its step-lane event): a straggler's step
// starts and ends later than the others', so one window for all would cut its work in two.
trace::RankSummary own_step(const trace::Trace& t, int step, int r) {
  trace::Trace mine;
  mine.num_ranks = t.num_ranks;
  for (const trace::Event& e : t.events)
    if (e.rank == r) mine.events.push_back(e);
  return trace::analyze(mine, step).ranks.at(static_cast<size_t>(r));
}

}  // namespace

StragglerEffect straggler_effect(const trace::Trace& base, const trace::Trace& slow, int step,
                                 int straggler) {
  StragglerEffect e;
  e.straggler = straggler;
  for (int r = 0; r < base.num_ranks; ++r) {
    const trace::RankSummary b = own_step(base, step, r), s = own_step(slow, step, r);
    e.busy_base.push_back(b.busy);
    e.busy_slow.push_back(s.busy);
    e.wait_base.push_back(b.comm_wait);
    e.wait_slow.push_back(s.comm_wait);
    e.step_base = std::max(e.step_base, b.span);
    e.step_slow = std::max(e.step_slow, s.span);
  }
  return e;
}

double timed_ring_all_reduce(const CommonOptions& c, int64_t bytes) {
  World world(c.world_options());
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({bytes / 4}, MemCategory::comm_buffers);
    ctx.comm->barrier();
    ctx.comm->all_reduce(t);
  });
  const trace::Trace trace = world.collect_trace();
  double start = 0, end = 0;
  for (const trace::Event& e : trace.events)
    if (e.lane == trace::Lane::comm && e.op == "all_reduce")
      start = std::max(start, e.start), end = std::max(end, e.end());
  return end - start;
}

std::unique_ptr<Lesson> make_faults_lesson() {
  return std::make_unique<FaultsLesson>();
}

}  // namespace mgpu::lessons

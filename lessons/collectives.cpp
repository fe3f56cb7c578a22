// Lesson 1 — collectives from scratch. All-reduce, reduce-scatter, all-gather, all-to-all and
// broadcast, built from nothing but send/recv (core/comm/local/ and the ring all-reduce of the
// exercise), run over a sweep of buffer sizes. The table is nccl-tests': time, algorithm bandwidth
// (bytes / time) and bus bandwidth (algbw x 2(N-1)/N for all-reduce, (N-1)/N for reduce-scatter,
// all-gather and all-to-all) — the number to compare with the link, since a ring moves 2(N-1)/N of
// the data through every link whatever N is. On the modeled clock the measured time is checked
// against the alpha-beta formula; under mpirun the ring also races MPI_Allreduce.
#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/comm/comm.h"
#include "core/comm/cost_model.h"
#include "core/runtime/context.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/collectives.h"
#include "lessons/collectives_internal.h"
#include "lessons/host_memory_check.h"
#include "lessons/training.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

using detail::format_size;
using detail::run_and_check;

namespace {

// Byte counts that need not be round (2(N-1)/N x S): KiB/MiB with a decimal when not whole.
std::string format_size_exact(int64_t bytes) {
  for (auto [unit, name] : {std::pair<int64_t, const char*>{1 << 20, "MiB"}, {1 << 10, "KiB"}})
    if (bytes >= unit)
      return bytes % unit == 0 ? fmt::format("{} {}", bytes / unit, name)
                               : fmt::format("{:.2f} {}", double(bytes) / unit, name);
  return fmt::format("{} B", bytes);
}

// What the formula says the busiest rank sends for one collective of S bytes (computed, shown
// beside the measured sent_bytes; core/theory/collectives.h).
int64_t formula_sent_bytes(const std::string& kind, int64_t bytes, int N) {
  if (kind == "all_reduce") return theory::ring_all_reduce_sent_bytes(bytes, N);
  if (kind == "broadcast") return theory::binomial_broadcast_root_bytes(bytes, N);
  return theory::ring_shard_sent_bytes(bytes, N);
}

// all_to_all cuts the buffer into N equal blocks: its sizes are rounded down to a multiple of N.
int64_t elements_for(const std::string& kind, int64_t n, int ranks) {
  return kind == "all_to_all" ? n - n % ranks : n;
}

// Element counts from min to max bytes, x4 each row.
std::vector<int64_t> sweep(int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> counts;
  for (int64_t b = std::max<int64_t>(min_bytes, 4); b <= max_bytes; b *= 4) counts.push_back(b / 4);
  return counts;
}

}  // namespace

namespace detail {

std::string format_size(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);  // all_to_all's sizes, rounded to N blocks, are not round
}

}  // namespace detail

namespace {

// One line, exit code 2, for sizes or collectives the sweep cannot run.
void check_collectives_options(const CollectivesOptions& o) {
  if (o.min_bytes <= 0 || o.max_bytes < o.min_bytes)
    throw UsageError(fmt::format("--min-bytes ({}) must be > 0 and <= --max-bytes ({})",
                                 o.min_bytes, o.max_bytes));
  for (auto& k : o.ops)
    if (k != "all_reduce" && k != "reduce_scatter" && k != "all_gather" && k != "all_to_all" &&
        k != "broadcast")
      throw UsageError(
          fmt::format("unknown collective '{}' (use all_reduce, reduce_scatter, "
                      "all_gather, all_to_all, broadcast)",
                      k));
}

// Runs the sweep: every collective is one event per rank in the trace; a barrier first makes
// everyone start together, so the event spans measure the algorithm, not the stragglers. Returns
// whether each issued collective produced the right result on every rank.
std::vector<char> run_sweep(World& world, const std::vector<std::string>& kinds,
                            const std::vector<int64_t>& counts, int iters) {
  struct Issued {
    std::string kind;
    int64_t count;
  };
  std::vector<Issued> issued;
  for (auto& k : kinds)
    for (int64_t n : counts)
      for (int i = 0; i < iters; ++i) issued.push_back({k, elements_for(k, n, world.size())});
  std::vector<char> correct(issued.size(), 1);
  std::mutex correct_mutex;
  world.run([&](RankContext& ctx) {
    for (size_t i = 0; i < issued.size(); ++i) {
      ctx.comm->barrier();
      bool ok = run_and_check(*ctx.comm, issued[i].kind, issued[i].count);
      std::lock_guard lock(correct_mutex);
      correct[i] = correct[i] && ok;
    }
  });
  return correct;
}

// Each collective's time and bytes, in issue order. A collective starts when its last member
// arrives and ends when its last member leaves (the barrier's exits can be skewed across links of
// different latency: not the algorithm's cost). The bytes on the wire: the most any one rank's
// sends carried (trace sent_bytes).
struct Measured {
  std::vector<double> seconds;
  std::vector<int64_t> sent;
};

Measured measure_collectives(const trace::Trace& trace) {
  std::map<int64_t, std::pair<double, double>> span_by_seq;
  std::map<int64_t, int64_t> sent_by_seq;
  for (auto& e : trace.events) {
    if (e.lane != trace::Lane::comm || e.op == "barrier" || e.seq < 0) continue;
    sent_by_seq[e.seq] = std::max(sent_by_seq[e.seq], e.sent_bytes);
    auto [it, fresh] = span_by_seq.try_emplace(e.seq, e.start, e.end());
    if (!fresh)
      it->second = {std::max(it->second.first, e.start), std::max(it->second.second, e.end())};
  }
  Measured m;
  for (auto& [seq, span] : span_by_seq) {
    m.seconds.push_back(span.second - span.first);
    m.sent.push_back(sent_by_seq[seq]);
  }
  return m;
}

// One collective's table: a row per size, the best of its iterations (from `next` on in issue
// order), beside the alpha-beta time and the formula's bytes.
void print_collective_table(std::ostream& out, const std::string& kind, int N,
                            const std::vector<int64_t>& counts, int iters, const Measured& m,
                            const std::vector<char>& correct, const WorldOptions& wopt,
                            size_t& next, CollectivesResult& result) {
  const bool modeled = wopt.clock == ClockKind::modeled;
  fmt::print(out, "{} ({})\n", kind,
             kind == "broadcast"    ? "binomial tree, root 0"
             : kind == "all_to_all" ? "pairwise exchange on send/recv, S = what each rank holds"
                                    : "ring on send/recv");
  const std::string formula = kind == "all_reduce"  ? fmt::format("2({0}-1)/{0} x S", N)
                              : kind == "broadcast" ? fmt::format("ceil(log2 {}) x S, root", N)
                                                    : fmt::format("({0}-1)/{0} x S", N);
  fmt::print(out, "  {:>9} {:>12} {:>11} {:>11} {:>12} {:>12} {:>12} {:>8}\n", "size (S)", "time",
             "algbw GB/s", "busbw GB/s", modeled ? "alpha-beta" : "", "sent/rank", "formula",
             "correct");
  for (int64_t sweep_count : counts) {
    const int64_t n = elements_for(kind, sweep_count, N);
    double best = 1e300;
    int64_t most_sent = 0;
    bool ok = true;
    for (int i = 0; i < iters; ++i, ++next) {
      if (next < m.seconds.size()) best = std::min(best, m.seconds[next]);
      if (next < m.sent.size()) most_sent = std::max(most_sent, m.sent[next]);
      ok = ok && correct[next];
    }
    int64_t bytes = n * 4;
    auto bw = trace::collective_bandwidth(bytes, best, kind, N);
    double theory = comm::alpha_beta_time(kind, n, 4, N, wopt.profile);
    const int64_t by_formula = formula_sent_bytes(kind, bytes, N);
    fmt::print(out, "  {:>9} {:>12} {:>11.2f} {:>11.2f} {:>12} {:>12} {:>12} {:>8}\n",
               format_size(bytes), format_seconds(best), bw.algbw / 1e9, bw.busbw / 1e9,
               modeled ? format_seconds(theory) : "", format_size_exact(most_sent),
               format_size_exact(by_formula), ok ? "yes" : "NO");
    result.rows.push_back({kind, bytes, best, theory, bw.busbw, ok, most_sent, by_formula});
  }
  fmt::print(out,
             "  sent/rank: measured, the most bytes one rank's sends carried (trace "
             "sent_bytes); formula: {}\n",
             formula);
  fmt::print(out, "\n");
}

// The footer of a modeled run: each link's alpha and beta (the datasheet bandwidth times the
// profile's efficiency, the factor the times use), which link sets the ring's pace, and one row of
// the alpha-beta column worked out from them.
void print_clock_model(std::ostream& out, const std::vector<std::string>& kinds,
                       const std::vector<int64_t>& counts, int N, const WorldOptions& wopt) {
  const HardwareProfile& p = wopt.profile;
  fmt::print(out,
             "On the modeled clock a message of b bytes costs alpha + b / beta over its link; beta "
             "is the datasheet bandwidth\ntimes the share of it large messages reach (the "
             "profile's link efficiency):\n");
  auto describe = [](const LinkSpec& l) {
    return fmt::format("{}: alpha {}, beta {:g} GB/s x {:g} = {:.1f} GB/s", l.name,
                       format_seconds(l.latency), l.bandwidth / 1e9, l.efficiency,
                       l.achieved_bandwidth() / 1e9);
  };
  const bool spans_nodes = N > p.ranks_per_node;
  fmt::print(out, "  {}{}\n", spans_nodes ? "inside a node, " : "", describe(p.intra_node));
  if (spans_nodes) fmt::print(out, "  between nodes, {}\n", describe(p.inter_node));
  auto ring = std::find_if(kinds.begin(), kinds.end(), [](const std::string& k) {
    return k == "all_reduce" || k == "reduce_scatter" || k == "all_gather";
  });
  if (ring == kinds.end() || counts.empty() || N < 2) return;
  const int64_t n = counts.back();
  const int64_t chunk = (n + N - 1) / N * 4;
  const LinkSpec& pace = comm::slowest_ring_link(N, static_cast<double>(chunk), p);
  const std::string steps =
      *ring == "all_reduce" ? fmt::format("2({}-1)", N) : fmt::format("({}-1)", N);
  fmt::print(out,
             "A ring step sends one chunk of S/N on every link at once, so the slowest link on the "
             "ring sets its pace: {}.\nThe {} of {} in the alpha-beta column: {} x ({} + {} / "
             "{:.1f} GB/s) = {}.\n",
             pace.name, *ring, format_size(n * 4), steps, format_seconds(pace.latency),
             format_size_exact(chunk), pace.achieved_bandwidth() / 1e9,
             format_seconds(comm::alpha_beta_time(*ring, n, 4, N, p)));
}

}  // namespace

CollectivesResult run_collectives(const CommonOptions& c, const CollectivesOptions& o,
                                  std::ostream& out) {
  WorldOptions wopt = c.world_options();
  check_collectives_options(o);
  const std::vector<std::string> kinds = o.ops;
  check_collectives_fit_host(c, o.max_bytes);  // before any buffer is allocated
  const std::vector<int64_t> counts = sweep(o.min_bytes, o.max_bytes);
  const int iters = wopt.clock == ClockKind::modeled ? 1 : o.iters;

  World world(wopt);
  fmt::print(out, "ranks:  {}\n", describe_world(wopt));
  fmt::print(
      out, "ops:    {} over {} sizes, {} iteration(s) each; ring all-reduce: {} implementation\n\n",
      fmt::join(kinds, ", "), counts.size(), iters, ex::selected_seams().comm.impl_name);
  const std::vector<char> correct = run_sweep(world, kinds, counts, iters);
  trace::Trace trace = world.collect_trace({{"lesson", "collectives"}, {"config", c.to_json()}});
  const Measured measured = measure_collectives(trace);

  CollectivesResult result;
  result.trace = trace;
  size_t next = 0;
  for (auto& kind : kinds)
    print_collective_table(out, kind, world.size(), counts, iters, measured, correct, wopt, next,
                           result);
  if (wopt.clock == ClockKind::modeled) print_clock_model(out, kinds, counts, world.size(), wopt);
  if (world.is_mpi() && std::find(kinds.begin(), kinds.end(), "all_reduce") != kinds.end())
    race_mpi_allreduce(world, counts, o.iters, out);
  return result;
}

class CollectivesLesson : public Lesson {
 public:
  std::string name() const override { return "collectives"; }
  std::string summary() const override {
    return "all-reduce, reduce-scatter, all-gather, all-to-all, broadcast from send/recv; "
           "nccl-tests table";
  }
  LessonDefaults defaults() const override { return {.ranks = 4, .model_options = false}; }
  void add_options(CLI::App& app) override {
    app.add_option("--ops", options_.ops, "collectives to run")->delimiter(',')->group("Lesson");
    app.add_option("--min-bytes", min_bytes_, "smallest buffer, e.g. 1KiB")->group("Lesson");
    app.add_option("--max-bytes", max_bytes_, "largest buffer, e.g. 16MiB")->group("Lesson");
    app.add_option("--iters", options_.iters,
                   "repetitions per size on the wall clock (best is kept)")
        ->check(Positive)
        ->group("Lesson");
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    options_.min_bytes = parse_bytes(min_bytes_);
    options_.max_bytes = parse_bytes(max_bytes_);
    fmt::print(out, "== collectives: the communication patterns of training, from send/recv ==\n");
    CollectivesResult r = run_collectives(c, options_, out);
    bool all_ok = std::all_of(r.rows.begin(), r.rows.end(), [](auto& row) { return row.correct; });
    int rc = finish_trace(c, r.trace, name(), out);
    return all_ok ? rc : 1;
  }

 private:
  CollectivesOptions options_;
  std::string min_bytes_ = "1KiB";
  std::string max_bytes_ = "4MiB";
};

std::unique_ptr<Lesson> make_collectives_lesson() {
  return std::make_unique<CollectivesLesson>();
}

}  // namespace mgpu::lessons

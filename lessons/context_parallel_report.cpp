// The context-parallel lesson's report: per-GPU balance and wire bytes from the trace, activation
// memory from the allocator beside the formula, and the exact-vs-chunked comparison run.
#include <algorithm>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/runtime/dtype.h"
#include "core/theory/collectives.h"
#include "core/trace/analysis.h"
#include "lessons/context_parallel.h"
#include "lessons/context_parallel_internal.h"
#include "lessons/single_device.h"
#include "lessons/training.h"

namespace mgpu::lessons {

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

}  // namespace

namespace detail {

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

// The same run three ways: on one device, with exact CP (this layout, or zigzag when this run is
// the chunked one) and with chunked attention. Exact attention gives one model whatever the
// layout; chunked attention gives another.
void print_exactness(std::ostream& out, const CommonOptions& c, parallel::CpLayout layout,
                     const std::vector<float>& losses) {
  if (losses.empty()) return;
  const bool chunked = layout == parallel::CpLayout::chunked;
  CommonOptions o = side_run(c);
  std::ostringstream ignored;
  const ContextParallelResult r =
      train_context_parallel(o, chunked ? "zigzag" : "chunked", ignored);
  CommonOptions one = o;
  one.ranks = 1;
  const SingleDeviceResult single = train_single_device(one, ignored);
  if (r.losses.empty() || single.losses.empty()) return;
  const float exact = chunked ? r.losses.back() : losses.back();
  const float naive = chunked ? losses.back() : r.losses.back();
  const std::string exact_name =
      chunked ? "zigzag ring attention" : parallel::cp_layout_name(layout);
  fmt::print(out,
             "\nexact vs naive (same seed, data and steps, {} task): final loss {:.4f} on one "
             "device, {:.4f} with {} (cp {}), {:.4f} with chunked attention\n",
             c.task, single.losses.back(), exact, exact_name, c.ranks, naive);
  if (naive > exact + 0.01f)  // more than the wobble of one run
    fmt::print(out,
               "  chunked attention cannot see tokens in other GPUs' chunks: it learns a "
               "different, worse model (+{:.4f} over {})\n",
               naive - exact, exact_name);
  else
    fmt::print(out,
               "  chunked is not worse here: {} does not need tokens from other chunks within {} "
               "steps (try --task reverse --seq 16 --batch 16 --lr 0.001 --steps 300: the "
               "answers lie in other chunks)\n",
               c.task, c.steps);
}

}  // namespace detail

}  // namespace mgpu::lessons

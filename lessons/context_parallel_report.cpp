// The context-parallel lesson's report: per-GPU balance and wire bytes from the trace, activation
// memory from the allocator beside the formula, and the exact-vs-chunked comparison run.
#include <algorithm>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/runtime/dtype.h"
#include "core/theory/collectives.h"
#include "core/theory/mesh_traffic.h"
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

namespace {

struct WireFormula {
  int64_t bytes = 0;
  std::string how;
};

// Ring attention's bytes per GPU and step: K|V blocks (cp-1 hops each way, in the activations'
// e bytes) and dK|dV accumulators (cp hops, fp32 under mixed precision too: every hop adds to
// them). One block is theory::cp_kv_block_elements: B*(T/cp)*2*KV*D (2C for multi-head).
WireFormula ring_formula(const CommonOptions& c, const GPTConfig& cfg) {
  const int cp = c.ranks;
  const int64_t layers = cfg.layers, e = dtype_size(cfg.dtype);
  const int64_t kv =
      theory::cp_kv_block_elements(c.batch, c.seq / cp, cfg.kv_head_count(), cfg.head_size()) * 4;
  const std::string block = cfg.kv_head_count() == cfg.heads ? "2C" : "2*KV*D";
  if (e == 4)
    return {layers * (3 * int64_t{cp} - 2) * kv,
            fmt::format("{} layers x ({} K|V hops forward + {} backward + {} dK|dV hops) x "
                        "B*(T/cp)*{}*4 = {} x {}*{}*{}*4",
                        layers, cp - 1, cp - 1, cp, block, layers * (3 * cp - 2), c.batch,
                        c.seq / cp, kv / 4 / c.batch / (c.seq / cp))};
  return {layers * (2 * (int64_t{cp} - 1) * kv / 4 * e + int64_t{cp} * kv),
          fmt::format("{} layers x B*(T/cp)*{} x ({} K|V hops forward + {} backward) x {} B ({}) + "
                      "{} dK|dV hops x 4 B (fp32 accumulators)",
                      layers, block, cp - 1, cp - 1, e, precision_name(cfg.dtype), cp)};
}

// Ulysses' all-to-alls re-shard activations and their gradients (e bytes each), (cp-1)/cp of
// each leaving the GPU: qkv and out forward; qkv, dout and dqkv backward. With grouped-query
// attention qkv is (H + 2E) D wide, E the kv heads after Ulysses' copies (ulysses_kv_heads).
WireFormula ulysses_formula(const CommonOptions& c, const GPTConfig& cfg) {
  const int cp = c.ranks;
  const int64_t layers = cfg.layers, e = dtype_size(cfg.dtype), tokens = c.batch * (c.seq / cp);
  if (cfg.kv_head_count() == cfg.heads)
    return {layers * 11 * tokens * cfg.dim * e * (cp - 1) / cp,
            fmt::format("{} layers x 11 all-to-alls' worth of B*(T/cp)*C (qkv 3 + out 1 forward; "
                        "qkv 3 + dout 1 + dqkv 3 backward) x (cp-1)/cp",
                        layers)};
  const int spread = parallel::ulysses_kv_heads(cfg.kv_head_count(), cp);
  const int64_t width = (3 * (cfg.heads + 2 * int64_t{spread}) + 2 * cfg.heads) * cfg.head_size();
  return {layers * tokens * width * e * (cp - 1) / cp,
          fmt::format("{} layers x B*(T/cp)*D x (3 x (H + 2 x {} kv heads{}) for qkv, dqkv + 2 x H "
                      "for out, dout) x (cp-1)/cp",
                      layers, spread,
                      spread == cfg.kv_head_count() ? "" : " after the copies for KV < cp")};
}

// One K|V hop under grouped-query attention, beside multi-head attention's: the ring's saving.
void print_kv_per_hop(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg) {
  const int64_t b = c.batch, tl = c.seq / c.ranks, e = dtype_size(cfg.dtype);
  const int64_t kv = cfg.kv_head_count(), h = cfg.heads, d = cfg.head_size();
  const int64_t gqa = theory::cp_kv_block_elements(b, tl, kv, d) * e;
  const int64_t mha = theory::cp_kv_block_elements(b, tl, h, d) * e;
  fmt::print(out,
             "  K/V per hop: 2 x B x T/cp x KV x D x {} B = 2 x {} x {} x {} x {} x {} = {} (MHA: "
             "2 x B x T/cp x H x D = {}, H/KV = {}x less)\n",
             e, b, tl, kv, d, e, format_bytes(gqa), format_bytes(mha), h / kv);
}

}  // namespace

void print_wire(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                parallel::CpLayout layout, const trace::Trace& trace) {
  const trace::Interval window = trace::analyze(trace, last_step(trace)).window;
  std::vector<int64_t> attention(size_t(trace.num_ranks), 0), gradients(size_t(trace.num_ranks), 0);
  for (const trace::Event& e : trace.events) {
    if (e.lane != trace::Lane::comm || e.start < window.begin || e.start >= window.end) continue;
    auto& bucket = e.op == "all_reduce" ? gradients : attention;
    bucket[size_t(e.rank)] += e.sent_bytes;
  }
  const bool ring =
      layout == parallel::CpLayout::contiguous || layout == parallel::CpLayout::zigzag;
  WireFormula formula{0, "chunked attention never communicates"};
  if (ring) formula = ring_formula(c, cfg);
  if (layout == parallel::CpLayout::ulysses) formula = ulysses_formula(c, cfg);
  fmt::print(out, "\nbytes on the wire per GPU, last step (measured: trace sent_bytes):\n");
  for (int r = 0; r < trace.num_ranks; ++r)
    fmt::print(out, "  rank {}: attention {:>10}   gradient all-reduce {:>10}\n", r,
               format_bytes(attention[size_t(r)]), format_bytes(gradients[size_t(r)]));
  fmt::print(out, "  attention formula: {} = {}\n", formula.how, format_bytes(formula.bytes));
  if (ring && cfg.kv_head_count() != cfg.heads) print_kv_per_hop(out, c, cfg);
  fmt::print(out,
             "  gradients formula: ring all-reduce 2(cp-1)/cp x {} params x 4 B = {} (every GPU "
             "holds all weights)\n",
             with_commas(count_params(cfg)),
             format_bytes(int64_t(theory::ring_all_reduce_factor(c.ranks) *
                                  double(count_params(cfg)) * 4.0)));
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
      // the formula counts GPT-2's block: other styles show the allocator's figure alone
      const std::string measured = format_bytes(r.peak_activations.at(0));
      row += fmt::format(
          " {:>23}",
          cfg.style.is_gpt2()
              ? fmt::format("{} / {}", measured,
                            format_bytes(activation_formula(cfg, c.batch, t, cp, layout)))
              : measured);
    }
    row += fmt::format(
        "   {}", format_bytes(int64_t{4} * cfg1.layers * c.batch * cfg1.heads * int64_t{t} * t));
    fmt::print(out, "{}\n", row);
  }
  const char* rows = layout == parallel::CpLayout::chunked ? "(T/cp)" : "T";
  const bool lse = layout == parallel::CpLayout::contiguous || layout == parallel::CpLayout::zigzag;
  if (!model_config(c, *make_task(c)).style.is_gpt2())
    fmt::print(out, "  (allocator only: the formula counts GPT-2's block)\n");
  else if (c.precision == "fp32")
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

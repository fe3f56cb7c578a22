// Lesson 7 — tensor parallelism. Megatron splits every block over the GPUs of a node: attention
// heads and MLP hidden units are divided, each GPU multiplies its slice, and 2 all-reduces in the
// forward pass (g after attn.proj and mlp.proj) plus 2 in the backward pass (f before attn.qkv
// and mlp.fc) put the activations back together. The lesson measures that traffic from the trace,
// the per-GPU memory (the block's weights, gradients and optimizer state at 1/t) from the
// allocator, and answers "my TP model trains with SGD but Adam runs out of memory — why?".
#include "lessons/tensor_parallel.h"

#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/tensor_parallel.h"
#include "core/runtime/dtype.h"
#include "core/theory/collectives.h"
#include "core/theory/model_states.h"
#include "core/trace/analysis.h"
#include "lessons/training.h"

namespace mgpu::lessons {

// ---- the report ----------------------------------------------------------------------------

CollectiveTraffic last_step_traffic(const trace::Trace& trace, const std::string& op) {
  CollectiveTraffic t;
  const trace::Interval window = trace::analyze(trace, last_step(trace)).window;
  for (const trace::Event& e : trace.events) {
    if (e.rank != 0 || e.lane != trace::Lane::comm || e.op != op || e.group != "tp0") continue;
    if (e.start < window.begin || e.start >= window.end) continue;
    ++t.count;
    t.bytes += e.bytes;
    t.sent += e.sent_bytes;  // what rank 0 really put on the wire for it
    if (t.first_bytes < 0) t.first_bytes = e.bytes;
    t.same_size = t.same_size && e.bytes == t.first_bytes;
  }
  return t;
}

namespace {

void print_communication(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                         const trace::Trace& trace) {
  const CollectiveTraffic ar = last_step_traffic(trace, "all_reduce");
  const int count = ar.count;
  const int64_t bytes = ar.bytes, sent = ar.sent, first = ar.first_bytes;
  const bool same_size = ar.same_size;
  const int64_t btc = int64_t{c.batch} * c.seq * cfg.dim;
  const double t = c.ranks;
  fmt::print(out, "\ncommunication per step, rank 0, group tp0 (measured from the trace):\n");
  fmt::print(out,
             "  all-reduces  {} = {:.1f} per layer   formula: 2 forward (g) + 2 backward (f) = 4 "
             "per layer x {} layers = {}\n",
             count, double(count) / cfg.layers, cfg.layers, 4 * cfg.layers);
  fmt::print(out, "  each         {} elements{}   formula: B*T*C = {}*{}*{} = {}\n",
             with_commas(first / 4), same_size ? "" : " (sizes differ!)", c.batch, c.seq, cfg.dim,
             with_commas(btc));
  if (cfg.dtype != DType::f32)
    fmt::print(
        out,
        "  (--precision {}: the partial products are summed in fp32 and rounded once, as the "
        "single-device linear rounds its one fp32 result, so 4 B per element on the wire, "
        "not {})\n",
        c.precision, dtype_size(cfg.dtype));
  fmt::print(out, "  all-reduced  {} per step\n", format_bytes(bytes));
  fmt::print(out,
             "  on the wire  {} sent by rank 0 (measured)   formula: ring 2(t-1)/t x {} = {}{}\n",
             format_bytes(sent), format_bytes(bytes),
             format_bytes(static_cast<int64_t>(theory::ring_all_reduce_factor(t) * double(bytes))),
             c.ranks == 1 ? "; tp=1 sends nothing" : "");
}

void print_memory_split(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                        const TensorParallelResult& r) {
  const theory::TpParameterSplit n = theory::tp_parameter_split(cfg);
  const int64_t local = n.per_rank(c.ranks);
  // Mixed precision: 2-byte weights, fp32 gradients, and the optimizer's fp32 master weights
  // (4 B) beside AdamW's m and v: 2 + 4 + 12 B per parameter.
  const bool mixed = cfg.dtype != DType::f32;
  const theory::StateBytes b = theory::model_state_bytes(int(dtype_size(cfg.dtype)), c.optimizer);
  const int wb = b.params, ob = b.optimizer;
  auto peak = [&](MemCategory m) { return r.memory.peak[static_cast<int>(m)]; };
  fmt::print(out, "\nmemory per GPU, rank 0 (measured by the allocator vs formula):\n");
  fmt::print(out, "  parameters held  {} (measured)   formula: {} replicated + {} / {} = {}\n",
             with_commas(r.local_params), with_commas(n.replicated), with_commas(n.sharded),
             c.ranks, with_commas(local));
  fmt::print(out, "  {:<16} {:>12} {:>12}   {}\n", "", "measured", "formula", "(1 GPU)");
  auto row = [&](const char* what, MemCategory m, int bytes_per_param) {
    fmt::print(out, "  {:<16} {:>12} {:>12}   ({} = {} B x {} params)\n", what,
               format_bytes(peak(m)), format_bytes(int64_t{bytes_per_param} * local),
               format_bytes(int64_t{bytes_per_param} * (n.replicated + n.sharded)), bytes_per_param,
               with_commas(n.replicated + n.sharded));
  };
  row(mixed ? "weights (2 B)" : "weights", MemCategory::parameters, wb);
  row("gradients", MemCategory::gradients, 4);
  row(c.optimizer == "sgd" ? "sgd momentum"
      : mixed              ? "adamw m+v+master"
                           : "adamw m + v",
      MemCategory::optimizer_state, ob);
  fmt::print(out, "  {:<16} {:>12}   (activations: only the heads' and MLP units' share shrinks)\n",
             "activations", format_bytes(peak(MemCategory::activations)));
  fmt::print(out, "  {:<16} {:>12}\n", "all at once", format_bytes(r.memory.peak_total));
}

// What one rank holds of a block in another style than GPT-2's (grouped-query attention,
// SwiGLU): each linear's local shape beside the rule that cuts it, and their sum beside the
// formula's sharded part / tp (theory::block_parameters, the count the memory lines use).
void print_block_split(std::ostream& out, const GPTConfig& cfg, int tp) {
  const int64_t c = cfg.dim, d = cfg.head_size(), h = cfg.heads, kv = cfg.kv_head_count();
  const int64_t f = cfg.ffn_hidden(), bias = cfg.style.bias ? 1 : 0;
  const int64_t qkv_rows = (h / tp + 2 * (kv / tp)) * d, fc_rows = cfg.fc_width(f / tp);
  const int64_t qkv = qkv_rows * (c + bias), proj = c * (h / tp) * d, fc = fc_rows * (c + bias),
                mlp_proj = c * (f / tp);
  const theory::BlockParameters block = theory::block_parameters(cfg);
  fmt::print(out,
             "\nwhat each GPU holds of one block ({} query heads sharing {} kv heads, {} MLP of "
             "F = {}):\n",
             h, kv, mlp_name(cfg.style.mlp), f);
  fmt::print(out,
             "  attn.qkv   H/tp query heads + KV/tp kv heads = {} + {} heads: ({} + 2x{}) x D {} = "
             "{} rows of (H+2KV)D = {}, x C {}{} = {}\n",
             h / tp, kv / tp, h / tp, kv / tp, d, qkv_rows, cfg.qkv_width(), c,
             bias ? " (+ bias)" : "", with_commas(qkv));
  fmt::print(out, "  attn.proj  the columns of my query heads: C x HD/tp = {} x {} = {}\n", c,
             (h / tp) * d, with_commas(proj));
  if (cfg.swiglu())
    fmt::print(out,
               "  mlp.fc     gate and up rows of F/tp = {} units each: 2F/tp x C = {} x {}{} = {} "
               "(unit j's gate and up on one GPU: silu(gate_j) * up_j is local)\n",
               f / tp, fc_rows, c, bias ? " (+ bias)" : "", with_commas(fc));
  else
    fmt::print(out, "  mlp.fc     the rows of F/tp = {} hidden units: F/tp x C = {} x {}{} = {}\n",
               f / tp, fc_rows, c, bias ? " (+ bias)" : "", with_commas(fc));
  fmt::print(out, "  mlp.proj   the columns of my units: C x F/tp = {} x {} = {}\n", c, f / tp,
             with_commas(mlp_proj));
  fmt::print(out, "  sharded    {} per GPU   formula: block_parameters sharded {} / {} = {}\n",
             with_commas(qkv + proj + fc + mlp_proj), with_commas(block.sharded), tp,
             with_commas(block.sharded / tp));
  fmt::print(out, "  replicated {} on every GPU (the norms{})\n", with_commas(block.replicated),
             bias ? " and the row linears' biases" : "");
}

// The Adam question: the run did not fit. Say why, and find the tp at which it fits again.
void explain_out_of_memory(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                           const OutOfMemory& oom) {
  const theory::TpParameterSplit n = theory::tp_parameter_split(cfg);
  const int64_t local = n.per_rank(c.ranks);
  const bool mixed = cfg.dtype != DType::f32;
  const theory::StateBytes b = theory::model_state_bytes(int(dtype_size(cfg.dtype)), c.optimizer);
  const int wb = b.params, ob = b.optimizer;
  fmt::print(out, "\nout of memory at tp={} with {} (capacity {} per GPU):\n", c.ranks, c.optimizer,
             c.capacity.empty() ? "the profile's" : c.capacity);
  fmt::print(
      out,
      "  per GPU: {} params x ({} B weights + 4 B gradients + {} B {}) = {} before activations\n",
      with_commas(local), wb, ob,
      c.optimizer == "sgd" ? "momentum"
      : mixed              ? "AdamW m, v and fp32 master weights"
                           : "AdamW m and v",
      format_bytes(local * (wb + 4 + ob)));
  fmt::print(out,
             "  AdamW keeps 8 B/param of state (two moments) where momentum SGD keeps 4: {} "
             "more per GPU\n",
             format_bytes(local * 4));
  fmt::print(out, "  allocator when it failed:\n{}\n", oom.what());
  // Try larger tp sizes on the phantom device (shapes and bytes only, one step each).
  for (int tp = c.ranks + 1; tp <= std::min(64, cfg.heads); ++tp) {
    if (!parallel::tp_divides(cfg, tp)) continue;
    CommonOptions probe = c;
    probe.ranks = tp;
    probe.device = "phantom";
    probe.clock = "modeled";
    probe.steps = 1;
    probe.quiet = true;
    probe.checkpoint.clear();
    probe.resume.clear();
    probe.trace_path.clear();
    try {
      std::ostringstream ignored;
      train_tensor_parallel(probe, ignored);
      fmt::print(out,
                 "  {} fits again at tp={}: {} params per GPU (checked by a one-step phantom run "
                 "at the same capacity)\n",
                 c.optimizer, tp, with_commas(n.per_rank(tp)));
      return;
    } catch (const RankError& e) {
      bool out_of_memory = false;
      try {
        if (e.cause()) std::rethrow_exception(e.cause());
      } catch (const OutOfMemory&) {
        out_of_memory = true;
      } catch (...) {
      }
      if (!out_of_memory) {
        fmt::print(out, "  (could not probe tp={} here: {})\n", tp, e.what());
        return;
      }
    } catch (const std::exception& e) {  // e.g. under mpirun, where the world size is fixed
      fmt::print(out, "  (could not probe tp={} here: {})\n", tp, e.what());
      return;
    }
  }
  fmt::print(out, "  no tp up to {} heads fits: raise --capacity or shrink the model\n", cfg.heads);
}

class TensorParallelLesson : public Lesson {
 public:
  std::string name() const override { return "tensor_parallel"; }
  std::string summary() const override {
    return "Megatron TP: heads and MLP split over GPUs, 4 all-reduces per layer, weights at 1/t";
  }
  LessonDefaults defaults() const override { return {.ranks = 2, .steps = 20, .batch = 8}; }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== tensor_parallel: every block split over {} GPUs (Megatron column/row) ==\n",
               c.ranks);
    auto task = make_task(c);
    const GPTConfig cfg = model_config(c, *task);
    TensorParallelResult r;
    try {
      r = train_tensor_parallel(c, out);
    } catch (const RankError& e) {
      try {
        if (e.cause()) std::rethrow_exception(e.cause());
      } catch (const OutOfMemory& oom) {
        explain_out_of_memory(out, c, cfg, oom);
      } catch (...) {
      }
      throw;  // the CLI reports it (exit 2 for out of memory)
    }
    print_loss_summary(out, c, r.losses, " (the same global batch on every GPU)");
    print_communication(out, c, cfg, r.trace);
    print_memory_split(out, c, cfg, r);
    if (!cfg.style.is_gpt2()) print_block_split(out, cfg, c.ranks);

    CommonOptions one = c;  // the same model and batch on one GPU, for the step time
    one.ranks = 1;
    one.steps = std::min(c.steps, 2);
    one.quiet = true;
    one.checkpoint.clear();
    one.resume.clear();
    one.trace_path.clear();
    one.capacity.clear();   // a timing reference: the profile's capacity, whatever --capacity says
    one.backend = "local";  // under mpirun: this process alone, no collectives the others skip
    std::ostringstream ignored;
    const trace::TraceSummary s = trace::analyze(r.trace, last_step(r.trace));
    const trace::RankSummary& r0 = s.ranks.at(0);
    const double one_step = train_tensor_parallel(one, ignored).step_seconds;
    fmt::print(out,
               "\nstep time: {} on {} GPUs vs {} on 1 GPU (same profile, same batch): {:.2f}x "
               "(ideal {}x)\n",
               format_seconds(r.step_seconds), c.ranks, format_seconds(one_step),
               one_step / r.step_seconds, c.ranks);
    fmt::print(
        out,
        "  communication {} of the step is exposed: TP's all-reduces sit between the "
        "layers that need them, nothing hides them.\n  (all of its comm: {})\n  That is why TP "
        "stays inside a node (NVLink); try --profile docs/lessons/slow-1GBps.json to see it "
        "across a slow link.\n",
        format_seconds(r0.exposed_comm), format_comm_split(r0));
    r.trace.metadata["predictions"]["all_reduces_per_step"] = 4 * cfg.layers;
    return finish_run(c, r.trace, name(), out);
  }
};

}  // namespace

std::unique_ptr<Lesson> make_tensor_parallel_lesson() {
  return std::make_unique<TensorParallelLesson>();
}

}  // namespace mgpu::lessons

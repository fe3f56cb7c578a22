// Lesson — activation checkpointing. Backward needs what forward computed; keeping it all costs
// memory that grows with batch x sequence x layers (and x T for attention's probabilities).
// Recompute trades compute for memory: `selective` drops only the T x T attention probabilities
// and recomputes them from q, k (Korthikanti et al. 2022); `full` keeps only each block's input
// and output and re-runs the whole block forward in backward (~1/3 more compute). No
// communication changes; every mode gives bit-identical results.
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/memory/activations.h"
#include "core/runtime/allocator.h"
#include "core/runtime/context.h"
#include "lessons/lesson.h"
#include "lessons/precision_lessons.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

constexpr Recompute kModes[] = {Recompute::none, Recompute::selective, Recompute::full};

// Bytes one block keeps from forward to backward, measured: the allocator's activation bytes
// after a forward, minus the embedding's and head's, over the layers.
int64_t measured_bytes_per_layer(const GPTConfig& cfg, int batch) {
  RankContext ctx(0, 1, Device::phantom(), HardwareProfile::ideal(0), ClockKind::modeled);
  ctx.tracer.enabled = false;
  ScopedRank installed(ctx);
  GPT model(cfg);
  std::vector<int32_t> tokens(size_t(batch) * cfg.seq_len, 0);
  const int64_t before = ctx.allocator.stats().current[int(MemCategory::activations)];
  GPTActivations acts = GPTActivations::allocate(cfg, batch, cfg.seq_len);
  model.forward(tokens, tokens, acts);
  int64_t held = ctx.allocator.stats().current[int(MemCategory::activations)] - before;
  held -= acts.embedded.bytes();
  for (const Tensor* t : {&acts.head.ln, &acts.head.ln_mean, &acts.head.ln_rstd, &acts.head.logits,
                          &acts.head.dlogits})
    held -= t->bytes();
  return held / cfg.layers;
}

// The formula for this model (core/memory/activations.h): B T [ s (16 C + H T) + 16 ] for none
// (s = bytes per element; 16 C: ln1, qkv 3C, attention out, residual, ln2, fc 4C, gelu 4C, block
// output; H T: the probabilities; 16: four fp32 layernorm statistics), s 16 C + 16 for
// selective, s C for full. A Llama block keeps K = 5C + (H + 2 KV) D + fc + F elements per token
// (GQA's narrower qkv, SwiGLU's gate | up and product) and 8 bytes of RMSNorm statistics: the same
// formula with K and S in place of 16 C and 16.
std::string formula(GPTConfig cfg, int batch, Recompute mode, int64_t* bytes) {
  const int64_t bt = int64_t(batch) * cfg.seq_len, s = int64_t(dtype_size(cfg.dtype));
  const int64_t c = cfg.dim, h = cfg.heads, t = cfg.seq_len;
  const int64_t kept = memory::block_kept_elements_per_token(cfg);
  const int64_t stats = memory::norm_statistics_bytes_per_token(cfg);
  cfg.recompute = mode;
  *bytes = memory::block_kept_bytes(cfg, batch);
  const bool gpt2 = cfg.style.is_gpt2();
  const std::string k = gpt2 ? "16C" : "K", st = gpt2 ? "16" : "S";
  if (mode == Recompute::none)
    return fmt::format("BT[s({}+HT)+{}] = {}x[{}x({}+{})+{}]", k, st, bt, s, kept, h * t, stats);
  if (mode == Recompute::selective)
    return fmt::format("BT[s{}+{}] = {}x[{}x{}+{}]", k, st, bt, s, kept, stats);
  return fmt::format("BTsC = {}x{}x{}", bt, s, c);
}

// What K and S are for a block that is not GPT-2's (its 16 C and 16 B): qkv's (H + 2 KV) D,
// the MLP's fc and activation output (SwiGLU: gate | up 2F, then F), and the norms' statistics.
std::string kept_terms(const GPTConfig& cfg) {
  const int64_t f = cfg.ffn_hidden(), fc = cfg.fc_width(f);
  return fmt::format(
      "  K = 5C (ln1, attention out, res1, ln2, out) + qkv (H+2KV)D + fc {} + {} F = 5x{} + "
      "({}+2x{})x{} + {} + {} = {} elements per token; S = {} B of fp32 norm statistics{}\n",
      cfg.swiglu() ? "2F (gate | up)" : "F", cfg.swiglu() ? "silu(gate)*up" : "gelu", cfg.dim,
      cfg.heads, cfg.kv_head_count(), cfg.head_size(), fc, f,
      memory::block_kept_elements_per_token(cfg), memory::norm_statistics_bytes_per_token(cfg),
      cfg.rmsnorm() ? " (RMSNorm: rstd only, no mean)" : "");
}

// Largest batch whose one training step fits `capacity` (phantom device: shapes and bytes).
int largest_batch(const CommonOptions& c, const GPTConfig& cfg, const data::Task& task,
                  int64_t capacity) {
  CommonOptions o = c;
  o.device = "phantom";
  o.capacity = std::to_string(capacity);
  o.steps = 1;
  o.quiet = true;
  auto fits = [&](int batch) {
    o.batch = batch;
    try {
      train_measured(o, cfg, task);
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  if (!fits(1)) return 0;
  int lo = 1, hi = 2;
  while (hi <= (1 << 20) && fits(hi)) lo = hi, hi *= 2;
  if (hi > (1 << 20)) return lo;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

class ActivationCheckpointingLesson : public Lesson {
 public:
  std::string name() const override { return "activation_checkpointing"; }
  std::string summary() const override {
    return "recompute none/selective/full: activation bytes per layer, step time, largest batch";
  }
  LessonDefaults defaults() const override { return {.steps = 3, .batch = 16, .layers = 4}; }
  // --precision (the storage type) is a common option; --recompute is what the lesson varies.

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== activation_checkpointing: recompute activations instead of storing ==\n");
    if (c.recompute != "none")
      throw UsageError(
          "activation_checkpointing runs --recompute none, selective and full side by side: "
          "drop --recompute");
    if (c.log_every > 0)
      throw UsageError(
          "activation_checkpointing prints no per-step loss (it compares final results): drop "
          "--log-every");
    check_side_by_side_options(c);
    auto task = make_task(c);
    const GPTConfig base = model_config(c, *task);
    const WorldOptions world = c.world_options();
    fmt::print(out, "model: {}; batch {}, {} precision\n\n",
               describe_model(base, count_params(base)), c.batch, c.precision);

    fmt::print(out, "activation bytes one block keeps for backward (measured by the allocator):\n");
    if (!base.style.is_gpt2()) fmt::print(out, "{}", kept_terms(base));
    std::vector<MeasuredRun> runs;  // each one single-device run of the one training loop
    for (Recompute mode : kModes) {
      GPTConfig cfg = base;
      cfg.recompute = mode;
      int64_t predicted = 0;
      std::string f = formula(cfg, c.batch, mode, &predicted);
      const int64_t measured = measured_bytes_per_layer(cfg, c.batch);
      fmt::print(out, "  {:<9} {:>12} per layer   formula {} = {}{}\n", recompute_name(mode),
                 format_bytes(measured), f, format_bytes(predicted),
                 measured == predicted ? "" : "  (differs: see docs)");
      runs.push_back(train_measured(c, cfg, *task));
    }

    fmt::print(out, "\npeak activations and step time ({} steps, modeled on {}):\n", c.steps,
               world.profile.name);
    const double base_time = runs[0].modeled_step_seconds;
    for (size_t i = 0; i < runs.size(); ++i)
      fmt::print(out,
                 "  {:<9} activations peak {:>12}   step {:>10} ({:+.1f}%), of which recompute "
                 "{}\n",
                 recompute_name(kModes[i]),
                 format_bytes(runs[i].memory.peak[int(MemCategory::activations)]),
                 format_seconds(runs[i].modeled_step_seconds),
                 100.0 * (runs[i].modeled_step_seconds / base_time - 1.0),
                 format_seconds(runs[i].recompute_seconds));
    if (!c.quiet)  // --quiet: the measurements without the explanation
      fmt::print(out,
                 "  full recompute re-runs every block's forward: about +1/3 of a "
                 "forward+backward (forward ~1/3 of the FLOPs) when compute-bound\n");
    if (c.device != "phantom")
      fmt::print(out,
                 "  final loss: none {:.6f}, selective {:.6f}, full {:.6f} (bit-identical: {})\n",
                 runs[0].losses.back(), runs[1].losses.back(), runs[2].losses.back(),
                 runs[1].final_params == runs[0].final_params &&
                         runs[2].final_params == runs[0].final_params
                     ? "yes"
                     : "NO");

    const int64_t capacity = c.capacity.empty() ? int64_t(64) << 20 : world.capacity_override;
    fmt::print(out, "\nlargest batch whose training step fits {} per device{}:\n",
               format_bytes(capacity), c.capacity.empty() ? " (set with --capacity)" : "");
    for (Recompute mode : kModes) {
      GPTConfig cfg = base;
      cfg.recompute = mode;
      fmt::print(out, "  {:<9} {}\n", recompute_name(mode), largest_batch(c, cfg, *task, capacity));
    }
    return 0;
  }

 private:
};

}  // namespace

std::unique_ptr<Lesson> make_activation_checkpointing_lesson() {
  return std::make_unique<ActivationCheckpointingLesson>();
}

}  // namespace mgpu::lessons

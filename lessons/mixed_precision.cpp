// Lesson — mixed precision. The model computes and stores its weights and activations in a
// 2-byte type (bf16 or fp16) while the optimizer keeps fp32 master weights, so a step's small
// updates are not rounded away. No communication changes: gradients stay fp32 (4 B/param), so
// DDP all-reduces them exactly as before. fp16's 5 exponent bits flush small backward values to
// zero; dynamic loss scaling multiplies the loss by S (2^16 to start) to lift them into range.
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/model_states.h"
#include "lessons/lesson.h"
#include "lessons/precision_lessons.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

struct Variant {
  const char* label;
  DType dtype;
  bool scaling;
};
constexpr Variant kVariants[] = {{"fp32", DType::f32, false},
                                 {"bf16", DType::bf16, false},
                                 {"fp16, no loss scaling", DType::f16, false},
                                 {"fp16 + loss scaling", DType::f16, true}};

double per_param(const MeasuredRun& r, MemCategory c) {
  return double(r.memory.peak[int(c)]) / double(r.params);
}

// Bytes per parameter of each category, measured (allocator peak / parameters), beside the
// formula (core/theory/model_states.h: 16 fp32, 18 mixed).
void print_bytes_per_param(std::ostream& out, const std::vector<MeasuredRun>& runs, int64_t n) {
  fmt::print(out, "bytes per parameter, measured by the allocator (peak / {} params):\n",
             with_commas(n));
  fmt::print(out, "  {:<22} {:>8} {:>10} {:>10} {:>7}   formula\n", "precision", "weights",
             "gradients", "optimizer", "total");
  for (size_t i = 0; i < 3; ++i) {
    const MeasuredRun& r = runs[i];
    const double w = per_param(r, MemCategory::parameters),
                 g = per_param(r, MemCategory::gradients),
                 s = per_param(r, MemCategory::optimizer_state);
    const char* formula = kVariants[i].dtype == DType::f32
                              ? "4 weights + 4 grads + 8 (m, v) = 16"
                              : "2 weights + 4 fp32 grads + 12 (master 4, m 4, v 4) = 18";
    fmt::print(out, "  {:<22} {:>8.2f} {:>10.2f} {:>10.2f} {:>7.2f}   {}\n",
               precision_name(kVariants[i].dtype), w, g, s, w + g + s, formula);
  }
  fmt::print(out,
             "  gradients are kept in fp32 (accumulated and all-reduced in fp32); the saving is in "
             "the activations:\n");
  for (size_t i = 0; i < 2; ++i)
    fmt::print(out, "  activations peak, {}: {}\n", kVariants[i].label,
               format_bytes(runs[i].memory.peak[int(MemCategory::activations)]));
}

// The loss of every variant by step (same seed, same batches), fp16's flushed values, the scaler.
void print_losses(std::ostream& out, const CommonOptions& c, const std::vector<MeasuredRun>& runs) {
  // --quiet: the first and last steps only; --log-every K: every K steps.
  const int every = c.quiet ? c.steps : c.log_every > 0 ? c.log_every : std::max(1, c.steps / 6);
  fmt::print(out, "\nloss by step (same seed, same batches):\n  {:>6}", "step");
  for (const Variant& v : kVariants) fmt::print(out, " {:>22}", v.label);
  fmt::print(out, "\n");
  for (int s = 0; s < c.steps; ++s) {
    if (s % every != 0 && s + 1 != c.steps) continue;
    fmt::print(out, "  {:>6}", s + 1);
    for (const MeasuredRun& r : runs) fmt::print(out, " {:>22.4f}", r.losses[size_t(s)]);
    fmt::print(out, "\n");
  }
  fmt::print(out,
             "\nbackward values flushed to zero (nonzero in fp32, 0 after rounding), "
             "summed over the run:\n");
  for (size_t i = 1; i < runs.size(); ++i)  // a GPU's kernels do not count (StoreCounters)
    fmt::print(out, "  {:<22} {:>12}\n", kVariants[i].label,
               runs[i].unchecked_stores > 0 ? "not counted on a GPU"
                                            : with_commas(runs[i].flushed_in_backward));
  const MeasuredRun& scaled = runs[3];
  fmt::print(out,
             "loss scaler: {} steps skipped on inf/NaN, final scale {:g} (start 2^16, halve "
             "on overflow, double after 2000 clean steps)\n",
             scaled.skipped_steps.size(), scaled.loss_scale);
}

// Whether the step is bound by FLOPs: fp32's step over bf16's (measured) beside their peaks'
// ratio. The advice to try a larger model is given only to a run that is not already one.
void print_bound_advice(std::ostream& out, const CommonOptions& c,
                        const std::vector<MeasuredRun>& runs, const HardwareProfile& profile) {
  const double measured = runs[0].modeled_step_seconds / runs[1].modeled_step_seconds;
  const double peaks = profile.peak_for(DType::bf16) / profile.peak_for(DType::f32);
  fmt::print(out, "  fp32 / bf16 step time: measured {:.2f}x; the peaks' ratio is {:.2f}x\n",
             measured, peaks);
  constexpr double kNearPeaks = 0.8;  // within 20% of the peaks' ratio: FLOPs set the step
  if (measured >= kNearPeaks * peaks)
    fmt::print(out, "  the step is bound by FLOPs: its time follows the peaks\n");
  else if (c.device == "phantom" && c.dim >= 2048)
    fmt::print(out,
               "  kernel launches and memory traffic still weigh at this size; a larger --dim or "
               "--seq moves the ratio towards the peaks'\n");
  else
    fmt::print(out,
               "  a model this small is bound by kernel launches and memory traffic, not FLOPs; "
               "try --device phantom --dim 2048 --layers 8 --seq 512 to see the peaks' ratio\n");
}

// Each precision's modeled step time beside the compute-bound formula (training FLOPs over the
// profile's peak for that type).
void print_step_times(std::ostream& out, const CommonOptions& c, const GPTConfig& base, int64_t n,
                      const std::vector<MeasuredRun>& runs, const HardwareProfile& profile) {
  fmt::print(out, "\nstep time on the modeled clock ({}):\n", profile.name);
  const double tokens = double(c.batch) * c.seq;
  const double flops = theory::training_flops_per_token(n, base.layers, c.seq, base.dim) * tokens;
  for (size_t i = 0; i < 3; ++i) {
    const DType t = kVariants[i].dtype;
    fmt::print(out,
               "  {:<5} measured {:>10} per step   compute-bound formula 6N+attn FLOPs / peak "
               "= {:.3g} / {:.0f} TFLOP/s = {} (computed)\n",
               precision_name(t), format_seconds(runs[i].modeled_step_seconds), flops,
               profile.peak_for(t) / 1e12,
               profile.peak_for(t) > 0 ? format_seconds(flops / profile.peak_for(t))
                                       : std::string("0 (unbounded peak)"));
  }
  print_bound_advice(out, c, runs, profile);
}

class MixedPrecisionLesson : public Lesson {
 public:
  std::string name() const override { return "mixed_precision"; }
  std::string summary() const override {
    return "bf16/fp16 with fp32 master weights: bytes per parameter, loss curves, loss scaling";
  }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== mixed_precision: bf16 and fp16 training with fp32 master weights ==\n");
    if (c.precision != "fp32")
      throw UsageError(
          "mixed_precision runs fp32, bf16 and fp16 side by side: drop --precision "
          "(--recompute applies to all three)");
    check_side_by_side_options(c);
    auto task = make_task(c);
    const GPTConfig base = model_config(c, *task);
    const HardwareProfile profile = c.world_options().profile;
    std::vector<MeasuredRun> runs;  // each one single-device run of the one training loop
    for (const Variant& v : kVariants) {
      GPTConfig cfg = base;
      cfg.dtype = v.dtype;
      runs.push_back(train_measured(c, cfg, *task, /*loss_scaling=*/v.scaling));
    }
    const int64_t n = runs[0].params;
    fmt::print(out, "model: {}; {} steps of {} x {} tokens, AdamW lr {}\n\n",
               describe_model(base, n), c.steps, c.batch, c.seq, c.lr);
    print_bytes_per_param(out, runs, n);
    if (c.device != "phantom")
      print_losses(out, c, runs);
    else
      fmt::print(out, "\n(phantom device: no values, so no loss curves; timing and memory only)\n");
    print_step_times(out, c, base, n, runs, profile);
    return 0;
  }
};

}  // namespace

std::unique_ptr<Lesson> make_mixed_precision_lesson() {
  return std::make_unique<MixedPrecisionLesson>();
}

}  // namespace mgpu::lessons

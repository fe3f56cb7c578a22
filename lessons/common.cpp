#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "core/runtime/profile.h"
#include "lessons/lesson.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

void add_common_options(CLI::App& app, CommonOptions& c, const LessonDefaults& d) {
  c.ranks = d.ranks;
  c.steps = d.steps;
  c.batch = d.batch;
  c.layers = d.layers;
  const CLI::Validator& positive = Positive;  // finite and > 0 (lessons/validate.h)

  app.add_option("--ranks,-n", c.ranks, "number of ranks (virtual GPUs on cpu)")
      ->check(CLI::Range(1, 64))
      ->group("World");
  app.add_option("--device", c.device, "cpu | cuda | phantom (shapes only, no math)")
      ->check(CLI::IsMember({"cpu", "cuda", "phantom"}))
      ->group("World");
  app.add_option("--clock", c.clock, "modeled | wall | cuda (default: modeled on cpu/phantom)")
      ->check(CLI::IsMember({"", "modeled", "wall", "cuda"}))
      ->group("World");
  app.add_option("--profile", c.profile, "hardware profile preset or JSON file (`mgpu profiles`)")
      ->group("World");
  app.add_option("--capacity", c.capacity,
                 "per-rank memory capacity, e.g. 2GiB (default: profile's)")
      ->group("World");
  app.add_option("--comm-timeout", c.comm_timeout, "seconds before a stuck wait is reported")
      ->check(positive)
      ->check(AtMost(86400))
      ->group("World");
  app.add_option("--impl", c.impl, "which exercise implementations to use: reference | mine")
      ->check(CLI::IsMember({"reference", "mine"}))
      ->group("World");

  if (d.model_options) {
    app.add_option("--layers", c.layers, "transformer blocks")->check(positive)->group("Model");
    app.add_option("--dim", c.dim, "model width")->check(positive)->group("Model");
    app.add_option("--heads", c.heads, "attention heads (must divide --dim)")
        ->check(positive)
        ->group("Model");
    app.add_option("--seq", c.seq, "sequence length")->check(positive)->group("Model");

    app.add_option("--steps", c.steps, "training steps")->check(positive)->group("Training");
    app.add_option("--batch", c.batch, "global batch (sequences per step)")
        ->check(positive)
        ->group("Training");
    app.add_option("--task", c.task, "markov | reverse | modadd | text (with --data)")
        ->group("Training");
    app.add_option("--data", c.data_file,
                   "a text file to train on, byte-level (implies --task text)")
        ->group("Training");
    app.add_option("--optimizer", c.optimizer, "adamw | sgd")
        ->check(CLI::IsMember({"adamw", "sgd"}))
        ->group("Training");
    app.add_option("--lr", c.lr, "learning rate")->check(positive)->group("Training");
    app.add_option("--seed", c.seed, "seed for init and data")->check(Unsigned)->group("Training");
    app.add_option("--checkpoint", c.checkpoint,
                   "save parameters + optimizer state here at the end")
        ->check(OutputFile)
        ->group("Training");
    app.add_option("--resume", c.resume, "start from this checkpoint")->group("Training");
    app.add_option("--log-every", c.log_every, "print the loss every K steps (0 = ~10 lines)")
        ->check(NonNegative)
        ->group("Output");
  }
  app.add_option("--trace", c.trace_path, "write the Chrome/Perfetto trace JSON here")
      ->check(OutputFile)
      ->group("Output");
  app.add_flag("--viz", c.viz, "open the dashboard on the trace when done")->group("Output");
  app.add_flag("--quiet,-q", c.quiet, "print only the summary")->group("Output");
}

int64_t parse_bytes(const std::string& text) {
  return parse_size(text);
}

WorldOptions CommonOptions::world_options() const {
  WorldOptions w;
  w.ranks = ranks;
  w.device = parse_device_kind(device);
  w.clock = clock.empty() ? (w.device == DeviceKind::cuda ? ClockKind::cuda : ClockKind::modeled)
                          : parse_clock_kind(clock);
  if (w.clock == ClockKind::cuda && w.device != DeviceKind::cuda)
    throw UsageError("--clock cuda needs --device cuda (use --clock modeled or wall on cpu)");
  if (w.device == DeviceKind::phantom && w.clock != ClockKind::modeled)
    throw UsageError("the phantom device does no work, so only --clock modeled can time it");
  w.profile = HardwareProfile::load(profile);  // throws invalid_argument listing presets
  w.comm_timeout = comm_timeout;
  if (!capacity.empty()) w.capacity_override = parse_bytes(capacity);
  return w;
}

nlohmann::json CommonOptions::to_json() const {
  return {{"ranks", ranks},
          {"device", device},
          {"clock", clock.empty() ? "default" : clock},
          {"profile", profile},
          {"impl", impl},
          {"layers", layers},
          {"dim", dim},
          {"heads", heads},
          {"seq", seq},
          {"steps", steps},
          {"batch", batch},
          {"task", task},
          {"optimizer", optimizer},
          {"lr", lr},
          {"seed", seed}};
}

}  // namespace mgpu::lessons

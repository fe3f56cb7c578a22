// Lesson 0 — single device. One GPU trains a tiny GPT: forward, backward, optimizer step. It is
// the baseline every parallel lesson must reproduce exactly, and it shows where memory goes:
// fp32 weights (4 B/param) + gradients (4 B/param) + AdamW moments (8 B/param) = 16 B/param,
// plus activations that grow with batch x sequence x width x layers.
#include <chrono>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/model/checkpoint.h"
#include "lessons/single_device.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

// One training step: forward, backward, optimizer. Each phase is a scope on the timeline.
float train_step(GPT& model, optim::Optimizer& opt, const data::Batch& batch) {
  model.zero_grad();
  GPTActivations acts = GPTActivations::allocate(model.config(), batch.B, batch.T);
  float loss;
  {
    ComputeScope s({.name = "forward", .cat = trace::cat::forward});
    loss = model.forward(batch.tokens, batch.targets, acts);
  }
  {
    ComputeScope s({.name = "backward", .cat = trace::cat::backward});
    model.backward(batch.tokens, acts);
  }
  {
    ComputeScope s({.name = "optimizer", .cat = trace::cat::optimizer});
    opt.step();
  }
  return loss;
}

}  // namespace

SingleDeviceResult train_single_device(const CommonOptions& c, std::ostream& out) {
  WorldOptions wopt = c.world_options();
  if (wopt.ranks != 1)
    throw UsageError("single_device runs on one rank: drop --ranks or use --ranks 1");
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);

  World world(wopt);
  SingleDeviceResult result;
  auto wall_start = std::chrono::steady_clock::now();
  world.run([&](RankContext& ctx) {
    GPT model(cfg);
    auto opt = make_optimizer(c, model.params());
    int first_step = 0;
    if (!c.resume.empty()) {
      first_step = static_cast<int>(load_checkpoint(c.resume, model.params(), opt.get()).step);
      fmt::print(out, "resumed from {} at step {}\n", c.resume, first_step);
    }
    if (!c.quiet) {
      fmt::print(out, "model:  {}\n", describe_model(cfg, model.num_params()));
      fmt::print(out, "data:   {} task, {} sequences x {} tokens = {} tokens per step\n",
                 task->name(), c.batch, c.seq, int64_t{c.batch} * c.seq);
      fmt::print(out, "device: {}\n", describe_world(wopt));
      fmt::print(out, "optim:  {} lr {}\n\n", opt->name(), c.lr);
    }
    LossLog log(c, out);
    for (int step = first_step; step < c.steps; ++step) {
      StepScope scope(step);
      data::Batch batch = task->sample(step, c.batch, c.seq);
      log.record(step, train_step(model, *opt, batch));
    }
    result.losses = log.losses();
    result.params = model.num_params();
    result.modeled_seconds = ctx.clock.compute_now();
    if (!c.checkpoint.empty()) {
      save_checkpoint(c.checkpoint, model.params(), opt.get(), c.steps, c.to_json());
      fmt::print(out, "\ncheckpoint: {} (parameters + {} state, step {})\n", c.checkpoint,
                 opt->name(), c.steps);
    }
  });
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  int steps_run = static_cast<int>(result.losses.size());
  if (steps_run > 0) {
    double tokens = static_cast<double>(steps_run) * c.batch * c.seq;
    print_loss_summary(out, c, result.losses,
                       fmt::format(" (uniform guessing: {:.4f})", std::log(cfg.vocab)));
    fmt::print(out, "throughput: {} tokens/s on this machine ({} wall)",
               with_commas(static_cast<int64_t>(tokens / result.wall_seconds)),
               format_seconds(result.wall_seconds));
    if (wopt.clock == ClockKind::modeled)
      fmt::print(out, "; modeled on {}: {} tokens/s ({} per step)", wopt.profile.name,
                 with_commas(static_cast<int64_t>(tokens / result.modeled_seconds)),
                 format_seconds(result.modeled_seconds / steps_run));
    fmt::print(out, "\n");
  }
  print_memory(out, world);
  MemoryStats s = world.rank(0).allocator.stats();
  auto cat = [&](MemCategory m) { return s.peak[static_cast<int>(m)]; };
  fmt::print(
      out,
      "  per parameter: {:.0f} B weights + {:.0f} B gradients + {:.0f} B {} state = {:.0f} B; "
      "activations peak {} ({:.1f}x the weights)\n",
      double(cat(MemCategory::parameters)) / result.params,
      double(cat(MemCategory::gradients)) / result.params,
      double(cat(MemCategory::optimizer_state)) / result.params, c.optimizer,
      double(cat(MemCategory::parameters) + cat(MemCategory::gradients) +
             cat(MemCategory::optimizer_state)) /
          result.params,
      format_bytes(cat(MemCategory::activations)),
      double(cat(MemCategory::activations)) / cat(MemCategory::parameters));
  result.memory = s;

  nlohmann::json meta = {{"lesson", "single_device"}, {"config", c.to_json()}};
  result.trace = world.collect_trace(meta);
  return result;
}

class SingleDeviceLesson : public Lesson {
 public:
  std::string name() const override { return "single_device"; }
  std::string summary() const override {
    return "one GPU trains a tiny GPT: the baseline, and where memory goes";
  }
  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== single_device: one GPU trains a tiny GPT ==\n");
    SingleDeviceResult r = train_single_device(c, out);
    return finish_trace(c, r.trace, name(), out);
  }
};

std::unique_ptr<Lesson> make_single_device_lesson() {
  return std::make_unique<SingleDeviceLesson>();
}

}  // namespace mgpu::lessons

// Lesson 0 — single device. One GPU trains a tiny GPT: forward, backward, optimizer step. It is
// the baseline every parallel lesson must reproduce exactly, and it shows where memory goes:
// fp32 weights (4 B/param) + gradients (4 B/param) + AdamW moments (8 B/param) = 16 B/param,
// plus activations that grow with batch x sequence x width x layers.
#include <chrono>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "lessons/exercise_views.h"
#include "lessons/single_device.h"
#include "lessons/training.h"

namespace mgpu::lessons {

SingleDeviceResult train_single_device(const CommonOptions& c, std::ostream& out) {
  WorldOptions wopt = c.world_options();
  if (wopt.ranks != 1)
    throw UsageError(launched_by_mpi()
                         ? "single_device runs on one rank: use mpirun -n 1, or no mpirun"
                         : "single_device runs on one rank: drop --ranks or use --ranks 1");
  std::shared_ptr<const data::Task> task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  run::RunSpec spec = run_spec(c, task, cfg, c.batch);
  spec.parallelism = run::SingleDevice{};
  spec.train.report_ranks = true;
  spec.trace_meta = {{"lesson", "single_device"}, {"config", c.to_json()}};

  SingleDeviceResult result;
  result.params = count_params(cfg);
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, result.params));
    fmt::print(out, "data:   {} task, {} sequences x {} tokens = {} tokens per step\n",
               task->name(), c.batch, c.seq, int64_t{c.batch} * c.seq);
    fmt::print(out, "device: {}\n", describe_world(wopt));
    fmt::print(out, "optim:  {} lr {} weight decay {}\n\n", c.optimizer, c.lr, c.weight_decay);
  }
  LossLog log(c, out);
  auto wall_start = std::chrono::steady_clock::now();
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  const train::TrainResult& trained = ran.trained;
  result.modeled_seconds = trained.ranks.at(0).compute_seconds;
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.losses = trained.losses;
  if (trained.first_step > 0 || trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, trained);

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
  print_memory(out, trained.ranks);
  MemoryStats s = trained.ranks.at(0).memory;
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
  // Predicted by exercise 05's memory estimator (the student's own with --impl mine); bf16 and
  // fp16 keep the same 2 + 4 + 12 B (mixed_bf16 stands for both 2-byte types).
  print_memory_prediction(
      out,
      {cfg, c.optimizer,
       cfg.dtype == DType::f32 ? memory::Precision::fp32 : memory::Precision::mixed_bf16},
      s);
  result.memory = s;
  result.trace = std::move(ran.trace);
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

// What the training lessons share: building the model, data and optimizer from the common
// options, printing progress, and the end-of-run summary (loss, throughput, memory, timeline).
#pragma once
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/task.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/trace/event.h"
#include "core/train/trainer.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// The task named by --task/--data, and the model config that fits it.
std::unique_ptr<data::Task> make_task(const CommonOptions& c);
GPTConfig model_config(const CommonOptions& c, const data::Task& task);
// The model's parameter count, found by building it on a phantom device (shapes, no memory), so
// the host never allocates a model it only wants to describe.
int64_t count_params(const GPTConfig& cfg);
std::unique_ptr<optim::Optimizer> make_optimizer(const CommonOptions& c, const ParamList& params);
train::OptimizerFactory optimizer_factory(const CommonOptions& c);
// Refuses (UsageError, one line) --precision combinations the training loop cannot run: SGD
// without fp32 (no master-weight wrapper) and fp16 (its loss scaler is not in the layouts yet).
// train_options calls it.
void check_training_precision(const CommonOptions& c);
// The trainer's options from the common ones (--steps, --resume, --checkpoint); `config` goes into
// the checkpoint header (default: the common options).
train::TrainOptions train_options(const CommonOptions& c, int global_batch, const GPTConfig& cfg,
                                  nlohmann::json config = nullptr);
// "resumed from ... at step k" / "checkpoint: ..." when they happened.
void print_checkpoint_lines(std::ostream& out, const CommonOptions& c, const train::TrainResult& r);

// Prints "step  k/N  loss x.xxxx" about ten times per run (or every --log-every steps).
class LossLog {
 public:
  LossLog(const CommonOptions& c, std::ostream& out);
  void record(int step, float loss);  // step counts from 0
  const std::vector<float>& losses() const { return losses_; }

 private:
  std::ostream& out_;
  int steps_, every_;
  bool quiet_;
  bool phantom_;
  std::vector<float> losses_;
};

// "loss: 4.1618 -> 1.3986 over 150 steps<note>", or on the phantom device (no values) a line
// saying the run was timing only.
void print_loss_summary(std::ostream& out, const CommonOptions& c, const std::vector<float>& losses,
                        const std::string& note = "");

// "model: 2 layers, dim 64, 4 heads, seq 32, vocab 64 -> 101,248 parameters"
std::string describe_model(const GPTConfig& cfg, int64_t params);
// "device: cpu virtual GPU x4, clock modeled on 8xH100-NVLink (495 TFLOP/s, ...)"
std::string describe_world(const WorldOptions& w);

// Per-rank table of peak bytes by category (and of the sum), from the allocators.
void print_memory(std::ostream& out, World& world);

// The end-of-run picture every multi-rank lesson prints: the ASCII timeline of one step and the
// per-rank table (busy, comm, idle, bubble %, overlap %, bytes sent, peak memory). `step` picks
// the step to draw and analyse (default: the last one, past any warm-up effects).
void print_timeline(std::ostream& out, const trace::Trace& trace, std::optional<int> step = {});
void print_rank_table(std::ostream& out, const trace::Trace& trace, std::optional<int> step = {});
// The last step number recorded on the step lane, if any.
std::optional<int> last_step(const trace::Trace& trace);

// The end of every multi-rank lesson: print_timeline, print_rank_table, then finish_trace.
int finish_run(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
               std::ostream& out);

// Writes the trace (if --trace), prints where it went, and opens the dashboard (if --viz).
int finish_trace(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
                 std::ostream& out);

// 12345678 -> "12,345,678"
std::string with_commas(int64_t n);
// seconds -> "1.23 ms" / "4.56 us" / "2.10 s"
std::string format_seconds(double s);

}  // namespace mgpu::lessons

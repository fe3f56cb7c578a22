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
#include "core/run/run.h"
#include "core/runtime/trace_event.h"
#include "core/trace/analysis.h"
#include "core/train/trainer.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

// The task named by --task/--data, and the model config that fits it.
std::unique_ptr<data::Task> make_task(const CommonOptions& c);
GPTConfig model_config(const CommonOptions& c, const data::Task& task);
// The mixture-of-experts fields of `c` (refusing expert options on a dense model) and the
// routing --impl selected (exercise 09); model_config and the planner's model both set them.
void set_expert_config(GPTConfig& cfg, const CommonOptions& c);
// The model's parameter count, found by building it on a phantom device (shapes, no memory), so
// the host never allocates a model it only wants to describe.
int64_t count_params(const GPTConfig& cfg);
std::unique_ptr<optim::Optimizer> make_optimizer(const CommonOptions& c, const ParamList& params);
train::OptimizerFactory optimizer_factory(const CommonOptions& c);
// Refuses (UsageError, one line) --precision combinations the training loop cannot run: SGD
// without fp32 (no master-weight wrapper). train_options calls it.
void check_training_precision(const CommonOptions& c);
// The trainer's options from the common ones (--steps, --resume, --checkpoint); `config` goes into
// the checkpoint header (default: the common options). --precision fp16 turns on loss scaling.
train::TrainOptions train_options(const CommonOptions& c, int global_batch, const GPTConfig& cfg,
                                  nlohmann::json config = nullptr);
// The one place the common options become a run (core/run/run.h): the model, the world, the
// task, the trainer's options (train_options) and the optimizer. The lesson sets the parallelism
// and the trace's metadata, and may ask for the ranks' reports or the trained parameters.
run::RunSpec run_spec(const CommonOptions& c, std::shared_ptr<const data::Task> task,
                      const GPTConfig& cfg, int global_batch, nlohmann::json config = nullptr);
// "resumed from ... at step k" / "checkpoint: ..." when they happened, then print_loss_scaling.
void print_checkpoint_lines(std::ostream& out, const CommonOptions& c, const train::TrainResult& r);
// fp16 runs: "loss scaling (fp16): 1 step skipped on inf/NaN gradients (step 7), every rank
// together; scale now 32768" (nothing without loss scaling).
void print_loss_scaling(std::ostream& out, const train::TrainResult& r);

// One single-device run on the trainer, measured, for the lessons that compare runs of the same
// model side by side (mixed_precision, activation_checkpointing).
struct MeasuredRun {
  std::vector<float> losses;  // per step (zeros on the phantom device)
  int64_t params = 0;
  std::vector<int> skipped_steps;   // fp16 loss scaler: steps skipped on inf/NaN
  float loss_scale = 1;             // after the last step (1 without loss scaling)
  int64_t flushed_in_backward = 0;  // backward stores of nonzero values that rounded to 0
  int64_t unchecked_stores = 0;     // backward stores a GPU made without counting them
  double modeled_step_seconds = 0;  // modeled clock, mean per step
  double recompute_seconds = 0;     // modeled time in "recompute" scopes, mean per step
  MemoryStats memory;               // allocator peaks over training (after building the model)
  std::vector<float> final_params;  // the fp32 master weights (the model's in fp32), in order
};
// Trains `cfg` (its dtype and recompute mode) through train::train with the single-device layout on
// one rank, with the common options' steps, batch, optimizer, device, profile and capacity.
// fp16 runs with dynamic loss scaling unless `loss_scaling` is false. Throws OutOfMemory when a
// step does not fit the capacity.
MeasuredRun train_measured(const CommonOptions& c, const GPTConfig& cfg, const data::Task& task,
                           bool loss_scaling = true);
// What the side-by-side lessons refuse (UsageError, one line): more than one rank, a clock other
// than modeled, checkpoints, traces, another optimizer than AdamW, --impl.
void check_side_by_side_options(const CommonOptions& c);

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
// The block style's part of describe_model ("; rmsnorm, swiglu MLP of width 192, rope positions
// (theta 10000), 2 kv heads (GQA), no biases"); empty for GPT-2's block.
std::string describe_style(const GPTConfig& cfg);
// "device: cpu virtual GPU x4, clock modeled on 8xH100-NVLink (495 TFLOP/s, ...)"
std::string describe_world(const WorldOptions& w);

// Per-rank table of peak bytes by category (and of the sum), from the ranks' allocators.
void print_memory(std::ostream& out, const std::vector<train::RankReport>& ranks);

// The end-of-run picture every multi-rank lesson prints: the ASCII timeline of one step and the
// per-rank table (busy, comm, idle, bubble %, overlap %, bytes sent, peak memory). `step` picks
// the step to draw and analyse (default: the last one, past any warm-up effects).
void print_timeline(std::ostream& out, const trace::Trace& trace, std::optional<int> step = {});
// `pipeline_schedule`: the idle share column is headed "bubble" (a pipeline's), else "idle %".
void print_rank_table(std::ostream& out, const trace::Trace& trace, std::optional<int> step = {},
                      bool pipeline_schedule = false);
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
// A rank's communication time split: "1.200 ms (0.800 ms on the wire + 0.400 ms waiting for a
// partner)" (trace::RankSummary's comm = comm_wire + comm_wait).
std::string format_comm_split(const trace::RankSummary& r);

}  // namespace mgpu::lessons

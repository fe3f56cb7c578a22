// The planner's engine: one candidate layout of a model on a cluster, simulated on the modeled
// clock. Only one representative rank per pipeline stage runs (its tensor-, context- and
// data-parallel peers do the same work at the same time, so their collectives are costed on the
// links those groups really use instead of being run); the pipeline's point-to-point traffic
// between the stage ranks is real. The same layout can also run as a full phantom run (every
// rank a thread), which is what the representative simulation is checked against.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "core/model/gpt.h"
#include "core/parallel/hybrid.h"
#include "core/runtime/allocator.h"
#include "core/runtime/profile.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::plan {

// One way to train the model: the mesh, how the batch is cut, and the options of every rank.
struct Layout {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int ep = 1;               // expert-parallel ranks, carved out of dp (models with experts)
  int microbatch_size = 1;  // sequences per micro-batch
  int microbatches = 1;     // per data-parallel replica and step
  // A schedule the hybrid mesh runs (core/theory/schedule_kind.h: runs_on_mesh), by name.
  std::string schedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b);
  int virtual_stages = 1;          // interleaved: layer chunks per stage (V >= 2)
  int zero = 0;                    // ZeRO stage over dp (0 or 1)
  std::string precision = "bf16";  // fp32 | bf16 | fp16
  std::string recompute = "none";  // none | selective | full
  // Megatron-LM's tensor-parallel choices (tp > 1): sequence parallelism in the blocks and the
  // vocabulary-parallel head; set as Megatron recommends by with_megatron_choices. Under a 2-byte
  // precision the TP partial sums travel in that type, as Megatron sends them.
  bool sp = false;
  bool vocab_parallel_head = false;
  int gpus() const { return dp * tp * pp * cp; }
  int global_batch() const { return dp * microbatches * microbatch_size; }
};

// `l` with sp and the vocabulary-parallel head on wherever the hybrid engine can run them for
// `model`: tp > 1; sp also needs no cp, tp dividing the sequence and a schedule without
// zero-bubble's split backward; the head needs tp dividing the vocabulary and untied embeddings.
Layout with_megatron_choices(const GPTConfig& model, Layout l);

// What is trained: the model (its dtype/recompute are overridden by the layout's) and optimizer,
// and the exercise functions the simulated ranks run (the program's --impl selection).
struct Workload {
  GPTConfig model;
  std::string optimizer = "adamw";
  parallel::HybridSeams seams;
};

enum class Simulation {
  representative,  // one rank per pipeline stage, symmetric peers' collectives costed
  full,            // every rank a phantom thread (small meshes only: tests compare the two)
};

struct Prediction {
  double step_seconds = 0;          // modeled clock, one training step (after a warm-up step)
  double tokens_per_s = 0;          // global_batch * seq / step_seconds
  double tflops_per_gpu = 0;        // model FLOPs (6 * params * tokens, + attention) / step / GPU
  double mfu = 0;                   // tflops_per_gpu / the profile's peak for the precision
  double bubble_fraction = 0;       // idle share of the step on the busiest stage, from the trace
  double exposed_comm_seconds = 0;  // communication not hidden under compute, worst stage
  CategoryBytes memory_peak{};  // allocator peak by category on the stage with the largest total
  int64_t memory_peak_total = 0;
  int worst_stage = 0;            // the stage whose memory is memory_peak
  bool tp_crosses_nodes = false;  // a tensor-parallel group spans two nodes of the profile
  double wall_seconds = 0;        // how long simulating took (progress/diagnostics only)
};

// Sequences are workload.model.seq_len tokens long. Runs a warm-up step and the measured one of
// the hybrid layout (core/parallel/hybrid.h) on the phantom device and the modeled clock.
// Throws std::invalid_argument (one line) when the layout cannot run the model (see
// parallel::check_hybrid), and for what depends on the mesh rather than the options: more than 64
// stages (one thread each), more than 64 GPUs in Simulation::full, and pp > 1 with tp*cp*dp neither
// a multiple nor a divisor of the profile's GPUs per node (stages could not be placed on nodes as
// threads; such a layout of at most 64 GPUs is simulated in full instead). Memory past the
// profile's capacity is simulated, not refused: the caller compares memory_peak_total with the
// capacity.
Prediction simulate(const Workload& workload, const Layout& layout, const HardwareProfile& profile,
                    Simulation mode = Simulation::representative);

}  // namespace mgpu::plan

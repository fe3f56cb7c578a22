// Hybrid DP x TP x PP ("3D parallelism", as Megatron-LM trains the largest models): the ranks sit
// on a mesh tp x cp x dp x pp (tp fastest, so a tensor-parallel group is neighbours in one node).
//   pp: the layers are cut into stages; micro-batches flow through them on a schedule (GPipe,
//       1F1B, interleaved 1F1B over V chunks per stage, ZB-H1's split backward), each tp rank of
//       stage s sending its (replicated) activation to the SAME tp rank of stage s+1 over its pp
//       group.
//   tp: inside a stage every block is split Megatron-style: f/g all-reduces in the tp group, 4
//       per block per micro-batch (2 forward, 2 backward).
//   dp: the whole pipeline is replicated; each replica trains on its share of the batch and the
//       gradients are averaged over the dp group once per step, after the last micro-batch.
//       With ZeRO (zero = 1, 2, 3; zero_over_dp.h) that all-reduce is split in its two halves
//       around the optimizer: reduce-scatter the gradients, each dp rank updates (and keeps Adam
//       state and fp32 masters for) only its chunk of the stage, all-gather the parameters: the
//       same bytes on the wire, 1/dp of the optimizer state (ZeRO-2: and of the gradients
//       between steps; ZeRO-3, FSDP x TP x PP as torchtitan runs it: and of the parameters).
//   cp: (context parallelism) every sequence is split over the cp group, zigzag (chunks r and
//       2cp-1-r, equal causal work); attention's K|V blocks go round the cp ring (ring
//       attention), and the gradients are averaged over cp before dp.
//   ep: (expert parallelism, a model with experts) each dp group's ranks are cut into ep groups
//       of ep ranks; each rank of one holds experts / ep whole experts of every MoE block of its
//       stage, and the routed tokens of the ep group travel to their experts and back by two
//       all-to-alls per MoE block and pass. Dense gradients average over dp; an expert's over
//       the dp / ep ranks that hold it (edp). With tp > 1 the experts are not tensor-split: each
//       tp rank holds its ep share of whole experts and computes them redundantly (Megatron
//       would split the tokens over tp instead: expert-TP = 1).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/parallel/context_parallel.h"
#include "core/parallel/expert_parallel.h"
#include "core/parallel/mesh.h"
#include "core/parallel/pipeline/executor.h"
#include "core/parallel/pipeline/mirror_gradients.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero_over_dp.h"
#include "core/runtime/all_reduce_fn.h"
#include "core/theory/schedule_kind.h"
#include "core/train/layout.h"

namespace mgpu::parallel {

struct HybridOptions {
  MeshShape mesh;  // tp, cp, dp, pp (and ep, carved out of dp)
  // A schedule the mesh runs (core/theory/schedule_kind.h: runs_on_mesh), by name.
  std::string schedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b);
  int microbatches = 4;          // per data-parallel replica and step
  int virtual_stages = 1;        // interleaved: layer chunks per stage (V)
  int zero = 0;                  // 0: gradients all-reduced over dp; 1-3: ZeRO-1/2/3 over dp
  MeshGroupFactory mesh_groups;  // empty: Comm::split (the planner's representative passes one)
  // Megatron-LM's tensor-parallel choices (tp > 1; core/parallel/hybrid_megatron.cpp): where TP's
  // partial results are summed (fp32, or the activations' type as Megatron sends them), the
  // vocabulary-parallel head, and sequence parallelism in the blocks (--sp).
  PartialSums tp_sums = PartialSums::fp32;
  bool vocab_parallel_head = false;
  bool sequence_parallel = false;
  // The pipeline lesson's theory mode: every F and B at a fixed cost (empty: the kernels' time).
  std::optional<pipeline::TheoryCosts> theory;
  std::string name = "hybrid";  // the layout's name in messages ("pipeline": pipeline_layout)
};

// Throws std::invalid_argument (one line) unless the options above suit the model and the mesh:
// --sp and the vocabulary-parallel head need tp > 1; --sp needs tp to divide the sequence, no cp
// and a schedule without zero-bubble's split backward; the head needs tp to divide the vocabulary
// and untied embeddings. (Called by check_hybrid.)
void check_megatron_options(const GPTConfig& cfg, const HybridOptions& options);

// The exercise functions a hybrid rank runs: exercise 06's linears (tp), exercise 07's merge (cp),
// exercise 08's owned chunk and sharded step (ZeRO-1 over dp), exercise 03's GPipe and 1F1B
// compute orders (pp) and exercise 01's all-reduce (the world the planner's simulation makes).
struct HybridSeams {
  TpSeams tp;
  CpSeams cp;
  ZeroSeams zero;
  pipeline::PipelineSeams pipeline;
  comm::AllReduceFn all_reduce;
};

// Whether the schedule splits a backward into zero-bubble's B and W (zb-h1, zbv, dualpipev,
// dualpipe), which a mixture-of-experts block cannot: the hybrid engine and the planner skip them
// for a model with experts.
bool splits_backward(const std::string& schedule);

// Throws std::invalid_argument (one line, naming meshes that work) unless the mesh multiplies to
// `world_size`, the sequence (cfg.seq_len) splits into 2 x cp zigzag chunks, tp divides the heads
// and the MLP width, pp divides the layers (or splits them within 2% of even:
// theory::pipeline_stages_fit) and pp x V chunks divides them, the schedule is gpipe, 1f1b,
// interleaved (M >= pp) or zb-h1, zero is 0 to 3, and the global batch splits into dp x
// microbatches equal parts; with experts, ep divides dp and the experts, and cp, ZeRO and the
// split-backward schedules are refused.
void check_hybrid(const GPTConfig& cfg, const HybridOptions& options, int world_size,
                  int global_batch);

// One rank of a hybrid run, as the training loop sees it (core/train/layout.h): the engine for
// every mesh with a pipeline axis (the pipeline alone is the mesh with the other axes 1).
class HybridLayout : public train::Layout {
 public:
  // Collective over `world`: every rank builds the mesh (its groups live in the layout).
  HybridLayout(const GPTConfig& cfg, comm::Comm& world, const HybridOptions& options,
               const train::OptimizerFactory& make_optimizer, const HybridSeams& seams);
  std::string name() const override { return name_; }
  void before_step(int step) override;
  train::StepOutcome step(const data::Batch& global_batch, int step) override;
  std::vector<train::TensorShard> shards() override;
  optim::Optimizer* optimizer() override { return optimizer_.get(); }
  void report(train::RankReport& report) override;  // the stage's figures

  const Mesh& mesh() const { return mesh_; }
  pipeline::StageModel& stage() { return stage_; }
  const pipeline::StageStepStats& last_stats() const { return stats_; }
  // What the dp all-reduce carries per step: this stage's gradients (with experts, the dense
  // ones: the experts' go over edp).
  int64_t gradient_bytes();
  int64_t owned_elements();  // parameter elements this rank's optimizer updates

 private:
  void average_gradients_over(Axis axis);
  void average_gradients_over_dp();  // dense over dp; experts' over edp (summed, then / dp)
  std::vector<comm::Comm*> groups_holding_the_model();

  GPTConfig config_;
  std::string name_;
  Mesh mesh_;
  TpSlice slice_;
  std::unique_ptr<TensorParallelComm> tp_comm_;  // tp > 1: f and g (--sp: their halves)
  std::unique_ptr<HeadComm> head_comm_;          // the vocabulary-parallel head's, else null
  bool sequence_parallel_ = false;
  std::unique_ptr<RingAttention> ring_;          // cp > 1: attention round the cp ring
  std::unique_ptr<ExpertParallelComm> experts_;  // ep > 1: the MoE blocks' exchange over ep
  ParamList expert_params_, dense_params_;       // with experts: my experts' rows, the rest
  pipeline::StageModel stage_;
  std::unique_ptr<comm::Comm> embedding_group_;  // tied across stages: {first, last} of my pp
  std::unique_ptr<optim::Optimizer> optimizer_;
  pipeline::Schedule schedule_;
  pipeline::StageStepStats stats_;
  std::unique_ptr<pipeline::MirrorGradients> mirror_;  // DualPipe's two copies, else null
  ZeroSeams zero_seams_;
  std::unique_ptr<ZeroOverDp> zero_;  // ZeRO 1-3 over dp, else null
  std::optional<pipeline::TheoryCosts> theory_;
};

// The pipeline lesson's layout: the hybrid engine over `world` with only the pp axis above 1 (its
// group named "world" on the timeline, as it is the world), `options.mesh` set from the world.
std::unique_ptr<HybridLayout> pipeline_layout(const GPTConfig& cfg, comm::Comm& world,
                                              HybridOptions options,
                                              const train::OptimizerFactory& make_optimizer,
                                              const HybridSeams& seams);

}  // namespace mgpu::parallel

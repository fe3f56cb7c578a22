// Hybrid DP x TP x PP, top to bottom (see hybrid.h for the idea):
//   1. checking the mesh, and naming the ones that would work (hybrid_check.cpp);
//   2. building this rank's stage: the pipeline's layers for its pp coordinate, each block cut to
//      its tp slice and wired to the tp group's f/g, each MoE block to its ep share of the
//      experts and the ep group's exchange;
//   3. one step: this replica's share of the batch through the pipeline schedule (the executor,
//      on the pp group), then ONE gradient all-reduce over dp (with experts: the dense ones over
//      dp, the experts' over edp), then the optimizer (ZeRO, zero_over_dp.h: reduce-scatter over
//      dp, update my chunk, all-gather (ZeRO-3: the gather at the step's start));
//   4. the map of every local tensor into the full model (only dp replica 0 writes; ZeRO: every
//      dp rank writes its chunk; experts: the first ep group, edp 0, writes its rows).
#include "core/parallel/hybrid.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/data/sampler.h"
#include "core/model/init.h"
#include "core/parallel/flat_gradients.h"
#include "core/parallel/hybrid_megatron.h"
#include "core/parallel/vocab_parallel.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- the stage

HybridLayout::HybridLayout(const GPTConfig& cfg, comm::Comm& world, const HybridOptions& options,
                           const train::OptimizerFactory& make_optimizer, const HybridSeams& seams)
    : config_(cfg),
      name_(options.name),
      mesh_(world, options.mesh, options.mesh_groups),
      slice_(tp_slice(cfg, options.mesh.tp, mesh_.coord(Axis::tp))),
      tp_comm_(options.mesh.tp > 1 ? make_tp_comm(mesh_.group(Axis::tp), seams.tp, options)
                                   : nullptr),
      sequence_parallel_(options.sequence_parallel),
      schedule_(pipeline::make_schedule(options.schedule, options.mesh.pp, options.microbatches,
                                        options.virtual_stages, seams.pipeline)),
      zero_seams_(seams.zero),
      theory_(options.theory) {
  if (options.zero != 0) check_seams(zero_seams_);
  // cp: my zigzag share of every sequence; attention's scores span the whole sequence's keys.
  BlockShard shard = slice_.block();
  if (sequence_parallel_) shard.seq_parts = options.mesh.tp;  // --sp: T / tp tokens outside linears
  shard.expert_parts = options.mesh.ep;  // ep: each MoE block holds experts / ep of them
  if (options.mesh.cp > 1) {
    ring_ = std::make_unique<RingAttention>(mesh_.group(Axis::cp), CpLayout::zigzag, cfg.seq_len,
                                            seams.cp);
    shard.attention_keys = cfg.seq_len;
  }
  // My pipeline stage's layers, every block split to my tp slice, each materialised at its place
  // in the seeded single-device model (ZeRO: straight into the flat units, or the chunks, it
  // keeps).
  stage_ = pipeline::StageModel::declare(
      cfg, mesh_.coord(Axis::pp), options.mesh.pp, schedule_.virtual_stages, shard,
      [&](Block& block) { split_block(block, cfg, slice_); }, schedule_.placement);
  if (options.vocab_parallel_head && stage_.head)  // my rows of lm_head, before materialising
    split_head(*stage_.head, cfg, options.mesh.tp, mesh_.coord(Axis::tp));
  // ep: my experts' rows of each MoE block's four stacked tensors (whole experts on every tp
  // rank), born as the single-device model's slice like the rest.
  if (cfg.experts > 0) {
    for (auto& blocks : stage_.chunks)
      for (Block& block : blocks)
        for (Param* p : split_experts(block, cfg, options.mesh.ep, mesh_.coord(Axis::ep)))
          expert_params_.push_back(p);
    for (Param* p : stage_.params())
      if (std::find(expert_params_.begin(), expert_params_.end(), p) == expert_params_.end())
        dense_params_.push_back(p);
  }
  if (options.zero == 0) materialise(stage_.params(), cfg.seed, cfg.dtype);
  if (options.vocab_parallel_head && stage_.head) {
    head_comm_ =
        std::make_unique<VocabParallelHead>(mesh_.group(Axis::tp), cfg.vocab, options.tp_sums);
    stage_.head->comm = head_comm_.get();
  }
  embedding_group_ = pipeline::make_embedding_group(stage_, mesh_.group(Axis::pp));
  // The block's communication: TP's f and g around the linears, the cp ring for attention (a
  // null one: the plain op). The pipeline executor's regions stay open through them.
  if (options.mesh.ep > 1) experts_ = std::make_unique<ExpertParallelComm>(mesh_.group(Axis::ep));
  const BlockComm comm{.linear = options.mesh.tp > 1 ? tp_comm_.get() : nullptr,
                       .attention = ring_.get(),
                       .experts = experts_.get()};
  if (ring_ && stage_.embedding) stage_.embedding->positions = ring_->positions();
  for (auto& blocks : stage_.chunks)
    for (Block& block : blocks) block.comm = comm;
  if (schedule_.placement == pipeline::Placement::bidirectional)
    mirror_ = std::make_unique<pipeline::MirrorGradients>(mesh_.group(Axis::pp));
  if (options.zero == 0) {
    optimizer_ = make_optimizer(stage_.params());
    return;
  }
  // One flat unit per layer of my stage, cut over dp as the zero lesson cuts the whole model:
  // the optimizer sees only my dp rank's chunk of each.
  zero_ = std::make_unique<ZeroOverDp>(options.zero, mesh_.group(Axis::dp), zero_seams_, cfg,
                                       stage_.layers());
  optimizer_ = make_optimizer(zero_->owned());
}

int64_t HybridLayout::owned_elements() {
  if (zero_) return zero_->owned_elements();
  int64_t n = 0;
  for (Param* p : stage_.params()) n += shape_numel(p->shape);
  return n;
}

void HybridLayout::before_step(int) {
  // Every rank starts the step together, so bubbles share a common start. Barriers on tp, then
  // pp, then dp add up to a barrier of the world: leaving the last one means every rank of every
  // pipeline has arrived. (The world comm itself is only used to build the mesh.)
  // An axis of size 1 has nothing to wait for (and would put an empty group in the trace).
  for (Axis axis : {Axis::tp, Axis::cp, Axis::pp, Axis::dp})
    if (mesh_.shape().size(axis) > 1) mesh_.group(axis).barrier();
}

// ---------------------------------------------------------------------------------- one step

train::StepOutcome HybridLayout::step(const data::Batch& global_batch, int step) {
  const int dp = mesh_.shape().dp;
  // My replica's share of the batch; the schedule cuts it into micro-batches.
  const data::RowRange rows =
      data::shard_rows(global_batch.B, dp, mesh_.coord(Axis::dp), "data-parallel replicas");
  // Only the stage that embeds reads the tokens, only the one with the head the targets: a middle
  // stage's micro-batches carry their shape alone (a GPT-3 plan runs up to 64 stage threads).
  data::Batch mine = global_batch.rows(
      rows.begin, rows.end, {.tokens = bool(stage_.embedding), .targets = bool(stage_.head)});
  if (ring_) {  // cp: my zigzag columns of every sequence
    if (global_batch.T != config_.seq_len)
      throw std::invalid_argument(
          fmt::format("hybrid with cp was set up for sequences of {} tokens, got {}",
                      config_.seq_len, global_batch.T));
    mine = batch_columns(mine, ring_->positions());
  }
  if (zero_ && zero_->stage() >= 2)
    zero_->begin_step();  // fresh gradient buckets (ZeRO-3: and the gathered parameters)
  else
    stage_.zero_grad();
  pipeline::ExecutorOptions options{
      .theory = theory_,
      .loss_scale = loss_scale(),
      .sequence_parallel = sequence_parallel_ ? &mesh_.group(Axis::tp) : nullptr};
  stats_ = pipeline::run_schedule(stage_, schedule_,
                                  data::split_micro_batches(mine, schedule_.microbatches),
                                  mesh_.group(Axis::pp), options);
  if (mirror_) {  // DualPipe: the two copies of each stage sum their gradients and loss halves
    mirror_->all_reduce(stage_);
    if (stage_.head) stats_.loss = mirror_->loss(stats_.loss);
  }
  pipeline::all_reduce_embedding_grad(stage_, embedding_group_.get());  // tied across stages
  if (sequence_parallel_) sum_layernorm_grads_over_tp(stage_, mesh_.group(Axis::tp));
  // Gradients accumulated over every micro-batch; averaging them once now sends the stage's
  // gradient bytes once per step. Averaging per micro-batch would send M times as much for the
  // same result (the sum of averages is the average of sums).
  const std::vector<comm::Comm*> model_groups = groups_holding_the_model();
  // cp: each rank's gradient is d(its tokens' mean)/dW; their average is the replica's.
  if (ring_) average_gradients_over(Axis::cp);
  bool stepped = true;
  if (zero_) {
    // ZeRO: the all-reduce's two halves with the optimizer between them.
    stepped = zero_->end_step([&] { return optimizer_step(optimizer_.get(), model_groups, step); });
  } else {
    average_gradients_over_dp();
    stepped = optimizer_step(optimizer_.get(), model_groups, step);
  }
  // The stage with the head (the last; stage 0 in a V) knows its replica's mean loss; equal
  // replicas: the trainer averages them. One replica, whole sequences: it is the batch's.
  if (!stage_.head) return {.skipped = !stepped};
  if (mesh_.shape().dp == 1 && mesh_.shape().cp == 1)
    return {.loss = stats_.loss, .skipped = !stepped};
  return {.shard_loss = stats_.loss, .skipped = !stepped};
}

std::vector<comm::Comm*> HybridLayout::groups_holding_the_model() {
  // fp16's found-inf flag is agreed over every axis the model is spread along (a group of one
  // rank has nothing to agree on); a pipeline alone agrees over its stages.
  std::vector<comm::Comm*> groups;
  for (Axis axis : {Axis::dp, Axis::pp, Axis::tp, Axis::cp})
    if (mesh_.shape().size(axis) > 1) groups.push_back(&mesh_.group(axis));
  if (groups.empty()) groups.push_back(&mesh_.group(Axis::pp));
  return groups;
}

void HybridLayout::report(train::RankReport& report) {
  for (Param* p : stage_.params()) report.params_held += shape_numel(p->shape);
  report.params_updated = owned_elements();
  report.stage = train::StageFigures{.pp = mesh_.coord(Axis::pp),
                                     .layers = stage_.num_layers(),
                                     .peak_stashed = stats_.peak_stashed,
                                     .stash_bytes = stats_.stash_bytes,
                                     .peak_activation_bytes = stats_.peak_activation_bytes,
                                     .gradient_bytes = gradient_bytes()};
}

int64_t HybridLayout::gradient_bytes() {
  int64_t bytes = 0;  // with experts, the dp all-reduce carries the dense ones (edp the experts')
  for (Param* p : expert_params_.empty() ? stage_.params() : dense_params_)
    bytes += shape_numel(p->shape) * int64_t{sizeof(float)};  // gradients are fp32 (ZeRO-2/3:
  return bytes;                                               // whole only during the step)
}

void HybridLayout::average_gradients_over(Axis axis) {
  // One flat buffer, one all-reduce: the ring's 2(d-1)/d x the stage's gradient bytes.
  all_reduce_gradients(stage_.params(), mesh_.group(axis), comm::ReduceOp::avg);
}

void HybridLayout::average_gradients_over_dp() {
  const int dp = mesh_.shape().dp;
  if (expert_params_.empty()) {
    if (dp > 1) average_gradients_over(Axis::dp);
    return;
  }
  average_dense_and_expert_gradients(dense_params_, expert_params_, mesh_.group(Axis::dp),
                                     mesh_.group(Axis::edp));  // (ep 1: edp is dp)
}

// ---------------------------------------------------------------------------------- the map

std::vector<train::TensorShard> HybridLayout::shards() {
  // (cp ranks hold equal copies too: cp rank 0's is written.)
  // (DualPipe: stages s and pp-1-s hold the same parts; the lower half's are written.)
  const bool cp0 =
      mesh_.coord(Axis::cp) == 0 && (!mirror_ || mesh_.coord(Axis::pp) < mesh_.shape().pp / 2);
  const bool replica0 = mesh_.coord(Axis::dp) == 0 && cp0, tp0 = mesh_.coord(Axis::tp) == 0;
  // The dp replicas hold equal copies: replica 0's is written.
  std::vector<train::TensorShard> shards;
  if (!zero_ && !expert_params_.empty()) {
    // My experts' rows: written by the first ep group (edp 0), tp rank 0 (every tp rank holds
    // the same whole experts).
    const bool expert_writer = mesh_.coord(Axis::edp) == 0 && cp0 && tp0;
    shards = train::partitioned_shards(stage_.params(), optimizer_.get(), [&](const Param& p) {
      if (std::find(expert_params_.begin(), expert_params_.end(), &p) != expert_params_.end())
        return expert_writer;
      return p.spec.split() ? replica0 : replica0 && tp0;
    });
  } else if (!zero_) {
    shards = tp_shards(stage_.params(), *optimizer_, replica0, replica0 && tp0);
  } else {
    // ZeRO: every dp rank writes its own chunk (tp-replicated tensors: tp rank 0's).
    shards = zero_->shards(optimizer_.get(),
                           [&](const Param& p) { return (p.spec.split() || tp0) && cp0; });
  }
  pipeline::read_only_tied_copy(stage_, shards);  // tied: the first stage writes the one wte
  return shards;
}

// ---------------------------------------------------------------------------------- a pipeline

std::unique_ptr<HybridLayout> pipeline_layout(const GPTConfig& cfg, comm::Comm& world,
                                              HybridOptions options,
                                              const train::OptimizerFactory& make_optimizer,
                                              const HybridSeams& seams) {
  options.mesh = MeshShape{.pp = world.size()};
  options.name = "pipeline";
  // Each group is its first member's colour; the stages' group spans the world and is named so.
  options.mesh_groups = [&world](Axis axis, const std::vector<int>& members, int my_index,
                                 const std::string& name) {
    return world.split(members.front(), my_index, axis == Axis::pp ? "world" : name);
  };
  return std::make_unique<HybridLayout>(cfg, world, options, make_optimizer, seams);
}

}  // namespace mgpu::parallel

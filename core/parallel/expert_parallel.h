// Expert parallelism (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021;
// Megatron-Core's expert-parallel groups): the batch splits over every data-parallel rank as in
// DDP, and each mixture-of-experts layer's E experts split over the ranks of an ep group (rank j
// holds experts [j*E/ep, (j+1)*E/ep)), carved out of the dp ranks. Per MoE layer each rank routes
// its own tokens, then two variable-size all-to-alls over ep move rows:
//   dispatch: my tokens' rows to their experts' ranks (and, backward, combine's gradients)
//   combine:  the experts' outputs back to their tokens' ranks (and, backward, dispatch's)
// after a small all-to-all of per-expert counts. Dense gradients average over dp; expert
// gradients over edp, the dp/ep ranks holding the same experts.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/model/moe.h"
#include "core/model/trace_phase.h"
#include "core/optim/optimizer.h"
#include "core/parallel/mesh_layout.h"
#include "core/train/layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

// Throws std::invalid_argument (one line naming what works) unless ep >= 1 divides the experts
// and the data-parallel ranks, and the model has experts to split.
void check_ep_size(const GPTConfig& cfg, int dp, int ep);

// Declares `block`'s share of the experts (an MoE block; a dense one is left alone): rank `part`
// of `parts` holds experts [part*E/parts, (part+1)*E/parts), so its four stacked expert tensors
// get PartitionSpec::rows of those experts (the single-device model's slice, born as it when
// materialised). Returns them (empty for a dense block). The ExpertParallel layout and the
// hybrid engine both cut their MoE blocks with it.
ParamList split_experts(Block& block, const GPTConfig& cfg, int parts, int part);

// The gradient sync of a layout with experts: dense gradients averaged over dp, experts'
// summed over edp (the dp/ep ranks holding the same experts) and divided by dp. The
// ExpertParallel layout and the hybrid engine both run it.
void average_dense_and_expert_gradients(const ParamList& dense, const ParamList& experts,
                                        comm::Comm& dp, comm::Comm& edp);

// ------------------------------------------------------------------ the exchange
// The rows of one MoE layer travel over the ep group: the plan's counts by an all_to_all, the
// rows by all_to_all_v. The trace names the exchanges "dispatch" and "combine" ("... bwd" in the
// backward pass), with the MoE block's layer, both as the block states them (ExchangeSite); the
// counts' exchange, "dispatch counts", carries this rank's kept tokens per expert (Event::counts):
// the per-expert load the lesson and the dashboard read.
class ExpertParallelComm : public ExpertComm {
 public:
  explicit ExpertParallelComm(comm::Comm& ep);
  int ranks() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  ExchangePlan plan(const Routing& routing, int experts, const ExchangeSite& site) override;
  void to_experts(const Tensor& rows, Tensor& expert_rows, const ExchangePlan& plan,
                  const ExchangeSite& site) override;
  void to_tokens(const Tensor& expert_rows, Tensor& rows, const ExchangePlan& plan,
                 const ExchangeSite& site) override;

 private:
  static Tracer::CommLabel label(const char* exchange, const ExchangeSite& site);
  static const char* category(const ExchangeSite& site);  // the pass the regrouping runs in

  comm::Comm& ep_;
};

// The per-row regrouping around the all_to_all_v (both directions), exposed for tests.
// Received rows, packed by source rank and within a source by local expert, <-> rows grouped by
// local expert and within an expert by source rank.
// `category`: the trace category of the regrouping's compute scope (the pass it runs in).
void group_by_expert(Tensor& by_expert, const Tensor& by_source, const ExchangePlan& plan,
                     const std::string& category);
void group_by_source(Tensor& by_source, const Tensor& by_expert, const ExchangePlan& plan,
                     const std::string& category);

// ------------------------------------------------------------------ the part
// Expert parallelism as a part of the mesh engine (core/parallel/mesh_layout.h): dp ranks in all
// (each trains on its B/dp rows of the global batch), the experts of every MoE layer split over
// `ep` (PartitionSpec::rows of the four expert tensors: this rank's experts' slice of the
// single-device model), the rest replicated.
class ExpertParallelPart : public MeshPart {
 public:
  // `dp`: every data-parallel rank; `ep` and `edp`: the mesh's expert groups (ep divides dp).
  // The groups must outlive the part.
  ExpertParallelPart(const GPTConfig& cfg, comm::Comm& dp, comm::Comm& ep, comm::Comm& edp);
  std::string name() const override { return "expert_parallel"; }
  void shard_blocks(BlockShard& shard) const override { shard.expert_parts = ep_.size(); }
  void split(GPT& model) override;
  void attach(GPT& model, TracePhase& phase) override;
  data::Batch share(const data::Batch& global_batch) override;
  void synchronise(GPT& model) override;
  // fp16: an expert's overflow is only on its holders, so the found-inf flag is agreed over dp,
  // which holds every ep group.
  std::vector<comm::Comm*> model_groups() override { return {&dp_}; }
  bool loss_is_shard() const override { return true; }
  bool writes(const Param& p) const override;
  // This rank's expert parameters (the four stacked tensors of each MoE block), and the rest.
  const ParamList& expert_params() const { return expert_params_; }
  const ParamList& dense_params() const { return dense_params_; }

 private:
  GPTConfig config_;
  comm::Comm& dp_;
  comm::Comm& ep_;
  comm::Comm& edp_;
  std::unique_ptr<ExpertParallelComm> exchange_;
  ParamList expert_params_, dense_params_;
};

// One rank of an expert-parallel run: the mesh engine with the ep part (`mesh`: the mesh the
// groups come from, kept alive by the layout; null when the caller keeps them).
std::unique_ptr<MeshLayout> expert_parallel(const GPTConfig& cfg, comm::Comm& dp, comm::Comm& ep,
                                            comm::Comm& edp,
                                            const train::OptimizerFactory& make_optimizer,
                                            std::shared_ptr<Mesh> mesh = nullptr);

}  // namespace mgpu::parallel

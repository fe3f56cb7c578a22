// Expert parallelism, top to bottom (see expert_parallel.h for the idea):
//   plan:       my kept tokens per expert -> all_to_all of the counts -> who sends me what
//   dispatch:   rows by destination rank -> all_to_all_v -> regrouped by my local experts
//   combine:    the reverse (regrouped by source rank -> all_to_all_v -> rows in dispatch order)
//   step:       my B/dp rows forward and backward (the MoE blocks exchange as above), dense
//               gradients averaged over dp, expert gradients summed over edp and divided by dp.
#include "core/parallel/expert_parallel.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/data/sampler.h"
#include "core/model/init.h"
#include "core/ops/ops.h"
#include "core/parallel/flat_gradients.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

void check_ep_size(const GPTConfig& cfg, int dp, int ep) {
  if (cfg.experts <= 0)
    throw std::invalid_argument(
        "expert parallelism needs a model with experts: add --experts E (e.g. --experts 4)");
  if (ep >= 1 && cfg.experts % ep == 0 && dp % ep == 0) return;
  std::string works;
  for (int e = 1; e <= std::min(cfg.experts, dp); ++e)
    if (cfg.experts % e == 0 && dp % e == 0)
      works += (works.empty() ? "" : ", ") + std::to_string(e);
  throw std::invalid_argument(fmt::format(
      "expert parallelism over ep={} needs ep to divide the experts ({}) and the data-parallel "
      "ranks ({}): use ep = {}",
      ep, cfg.experts, dp, works));
}

// ---------------------------------------------------------------------------------- the plan

namespace {

// A phantom device has no values to route on: every rank routes its tokens the same balanced way
// and takes what it receives to be what it sends (the mirror). That holds only when every rank's
// experts get as many rows; otherwise the exchange's counts would not match between ranks.
void check_mirrored(const std::vector<int64_t>& send, int ranks, int experts) {
  const size_t local = send.size() / static_cast<size_t>(ranks);
  std::vector<int64_t> per_rank(static_cast<size_t>(ranks), 0);
  for (size_t e = 0; e < send.size(); ++e) per_rank[e / local] += send[e];
  if (std::adjacent_find(per_rank.begin(), per_rank.end(), std::not_equal_to<>()) == per_rank.end())
    return;
  throw std::invalid_argument(fmt::format(
      "the phantom device routes every token the same balanced way, which loads the {} ep ranks' "
      "experts unequally unless a micro-batch's tokens x top-k are a multiple of the {} experts "
      "in every sequence: not simulated",
      ranks, experts));
}

}  // namespace

ExpertParallelComm::ExpertParallelComm(comm::Comm& ep) : ep_(ep) {}

// Forward (and a full recompute's forward): "dispatch", "combine"; the backward's exchanges are
// the forward's reversed: "combine bwd" (to the experts), then "dispatch bwd" (to the tokens).
Tracer::CommLabel ExpertParallelComm::label(const char* exchange, const ExchangeSite& site) {
  const bool gradients = site.pass == MoePass::backward;
  return {.name = gradients ? fmt::format("{} bwd", exchange) : std::string(exchange),
          .layer = site.layer};
}

const char* ExpertParallelComm::category(const ExchangeSite& site) {
  return site.pass == MoePass::forward ? trace::cat::forward : trace::cat::backward;
}

ExchangePlan ExpertParallelComm::plan(const Routing& routing, int experts,
                                      const ExchangeSite& site) {
  const int n = ep_.size();
  if (experts % n != 0 || static_cast<int>(routing.tokens_per_expert.size()) != experts)
    throw std::logic_error(fmt::format(
        "expert exchange over {} ranks: {} experts (routing counts {}) do not split evenly", n,
        experts, routing.tokens_per_expert.size()));
  ExchangePlan plan{.ranks = n, .local_experts = experts / n};
  // Rank j holds experts [j*L, (j+1)*L): the per-expert counts in expert order are already
  // [ranks][local_experts].
  plan.send = routing.tokens_per_expert;
  // Counts are exact in f32 up to 2^24 rows per expert, far above any batch here. They are
  // known on the host; Tensor::from and to_vector move them to and from the rank's device.
  std::vector<float> send_counts(plan.send.begin(), plan.send.end());
  Tensor send = Tensor::from({experts}, send_counts, MemCategory::comm_buffers);
  Tensor recv = Tensor::empty({experts}, MemCategory::comm_buffers);
  {
    Tracer::CommLabel counts = label("dispatch counts", {.layer = site.layer});
    counts.counts = routing.tokens_per_expert;
    CommLabelScope scope(std::move(counts));
    ep_.all_to_all(send, recv);
  }
  plan.recv.resize(plan.send.size());
  if (!recv.has_data()) check_mirrored(plan.send, n, experts);
  const std::vector<float> recv_counts = recv.has_data() ? recv.to_vector() : std::vector<float>{};
  for (int s = 0; s < n; ++s)
    for (int e = 0; e < plan.local_experts; ++e) {
      const size_t at = static_cast<size_t>(s * plan.local_experts + e);
      // Phantom devices carry no values: every rank routes its equal share the same balanced way
      // (balanced_routing), so what rank s sends to my experts is what I send to them.
      plan.recv[at] = recv.has_data()
                          ? static_cast<int64_t>(recv_counts[at])
                          : plan.send[static_cast<size_t>(rank() * plan.local_experts + e)];
    }
  return plan;
}

// ---------------------------------------------------------------------------------- regrouping

namespace {

// Rows per rank of a [ranks][local_experts] table, as all_to_all_v's element counts.
std::vector<int64_t> element_counts(const std::vector<int64_t>& table, int ranks, int64_t width) {
  std::vector<int64_t> counts(static_cast<size_t>(ranks), 0);
  const size_t per_rank = table.size() / static_cast<size_t>(ranks);
  for (size_t i = 0; i < table.size(); ++i) counts[i / per_rank] += table[i] * width;
  return counts;
}

// Calls copy(expert-ordered row, source-ordered row, rows) for each (source, local expert)
// block of the received rows: by source they are packed source-major, by expert expert-major.
template <class Copy>
void for_each_block(const ExchangePlan& plan, Copy&& copy) {
  const int n = plan.ranks, local = plan.local_experts;
  const std::vector<int64_t> per_expert = plan.rows_per_local_expert();
  std::vector<int64_t> expert_start(static_cast<size_t>(local), 0);
  for (int e = 1; e < local; ++e) expert_start[e] = expert_start[e - 1] + per_expert[e - 1];
  int64_t by_source = 0;
  for (int s = 0; s < n; ++s)
    for (int e = 0; e < local; ++e) {
      const int64_t rows = plan.recv[static_cast<size_t>(s * local + e)];
      if (rows > 0) copy(expert_start[e], by_source, rows);
      expert_start[e] += rows;
      by_source += rows;
    }
}

// dst rows [to, to + rows) = src rows [from, from + rows).
void copy_rows(Tensor& dst, int64_t to, const Tensor& src, int64_t from, int64_t rows) {
  Tensor window = dst.rows(to, to + rows);
  ops::convert(window, src.rows(from, from + rows));
}

}  // namespace

void group_by_expert(Tensor& by_expert, const Tensor& by_source, const ExchangePlan& plan,
                     const std::string& category) {
  ComputeScope s({.name = "regroup by expert", .cat = category});
  for_each_block(plan, [&](int64_t expert_row, int64_t source_row, int64_t rows) {
    copy_rows(by_expert, expert_row, by_source, source_row, rows);
  });
}

void group_by_source(Tensor& by_source, const Tensor& by_expert, const ExchangePlan& plan,
                     const std::string& category) {
  ComputeScope s({.name = "regroup by source", .cat = category});
  for_each_block(plan, [&](int64_t expert_row, int64_t source_row, int64_t rows) {
    copy_rows(by_source, source_row, by_expert, expert_row, rows);
  });
}

// ---------------------------------------------------------------------------------- the exchanges

void ExpertParallelComm::to_experts(const Tensor& rows, Tensor& expert_rows,
                                    const ExchangePlan& plan, const ExchangeSite& site) {
  const bool gradients = site.pass == MoePass::backward;  // combine's backward
  const int64_t width = expert_rows.dim(-1);
  Tensor received = Tensor::empty(expert_rows.shape(), MemCategory::comm_buffers, rows.dtype());
  {
    CommLabelScope scope(label(gradients ? "combine" : "dispatch", site));
    ep_.all_to_all_v(rows, element_counts(plan.send, plan.ranks, width), received,
                     element_counts(plan.recv, plan.ranks, width));
  }
  group_by_expert(expert_rows, received, plan, category(site));
}

void ExpertParallelComm::to_tokens(const Tensor& expert_rows, Tensor& rows,
                                   const ExchangePlan& plan, const ExchangeSite& site) {
  const int64_t width = rows.dim(-1);
  Tensor by_source =
      Tensor::empty(expert_rows.shape(), MemCategory::comm_buffers, expert_rows.dtype());
  group_by_source(by_source, expert_rows, plan, category(site));
  const bool gradients = site.pass == MoePass::backward;  // dispatch's backward
  {
    CommLabelScope scope(label(gradients ? "dispatch" : "combine", site));
    ep_.all_to_all_v(by_source, element_counts(plan.recv, plan.ranks, width), rows,
                     element_counts(plan.send, plan.ranks, width));
  }
}

// ---------------------------------------------------------------------------------- the layout

void average_dense_and_expert_gradients(const ParamList& dense, const ParamList& experts,
                                        comm::Comm& dp, comm::Comm& edp) {
  // Dense parameters saw my B/dp rows: the mean over dp is the global batch's gradient.
  if (dp.size() > 1) all_reduce_gradients(dense, dp, comm::ReduceOp::avg);
  // An expert's gradient on its holder already sums the rows of every ep rank's tokens, each
  // with its rank's 1/(B/dp * T) loss scale: summed over the edp replicas (the other ep groups'
  // tokens) it covers the global batch, and 1/dp makes it the global mean.
  if (edp.size() > 1) all_reduce_gradients(experts, edp, comm::ReduceOp::sum);
  if (dp.size() > 1)
    for (Param* p : experts) ops::scale(p->grad, 1.0f / static_cast<float>(dp.size()));
}

ParamList split_experts(Block& block, const GPTConfig& cfg, int parts, int part) {
  if (!block.is_moe()) return {};
  const int64_t local = cfg.experts / parts, first = part * local;
  MoeLayer& moe = block.moe;
  ParamList experts = moe.expert_params();
  for (Param* p : experts) {
    Shape full = p->shape;
    full[0] = cfg.experts;
    p->spec = PartitionSpec::rows(full, {{first, first + local}});
  }
  return experts;
}

ExpertParallelPart::ExpertParallelPart(const GPTConfig& cfg, comm::Comm& dp, comm::Comm& ep,
                                       comm::Comm& edp)
    : config_(cfg), dp_(dp), ep_(ep), edp_(edp) {
  check_ep_size(cfg, dp.size(), ep.size());
}

void ExpertParallelPart::split(GPT& model) {
  // My experts' rows of the four stacked tensors: the single-device model's slice, born as it.
  for (Block& block : model.blocks)
    for (Param* p : split_experts(block, config_, ep_.size(), ep_.rank()))
      expert_params_.push_back(p);
  for (Param* p : model.params())
    if (!p->spec.split()) dense_params_.push_back(p);
}

void ExpertParallelPart::attach(GPT& model, TracePhase& phase) {
  // Even with ep = 1 (the exchanges are then local copies), so the trace carries the routing.
  exchange_ = std::make_unique<ExpertParallelComm>(ep_);
  model.set_block_comm({.phase = &phase, .experts = exchange_.get()});
}

data::Batch ExpertParallelPart::share(const data::Batch& batch) {
  // Data parallelism over every dp rank: my rows of the global batch.
  const data::RowRange mine = data::shard_rows(batch.B, dp_.size(), dp_.rank());
  return batch.rows(mine.begin, mine.end);
}

void ExpertParallelPart::synchronise(GPT&) {
  average_dense_and_expert_gradients(dense_params_, expert_params_, dp_, edp_);
}

bool ExpertParallelPart::writes(const Param& p) const {
  // Replicated tensors: dp rank 0's copy; my experts' rows: the first ep group's (edp rank 0).
  return p.spec.split() ? edp_.rank() == 0 : dp_.rank() == 0;
}

std::unique_ptr<MeshLayout> expert_parallel(const GPTConfig& cfg, comm::Comm& dp, comm::Comm& ep,
                                            comm::Comm& edp,
                                            const train::OptimizerFactory& make_optimizer,
                                            std::shared_ptr<Mesh> mesh) {
  return std::make_unique<MeshLayout>(cfg, std::make_unique<ExpertParallelPart>(cfg, dp, ep, edp),
                                      make_optimizer, std::move(mesh));
}

}  // namespace mgpu::parallel

// Internal to core/parallel/pipeline/executor*.cpp: one stage's runner and its stash. The
// runner's ends under sequence parallelism are in executor_sequence_parallel.cpp, zero-bubble's
// B under recompute and W in executor_zero_bubble.cpp, the rest in executor.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/parallel/pipeline/executor.h"
#include "core/parallel/pipeline/p2p.h"
#include "core/parallel/pipeline/zero_bubble.h"
#include "core/runtime/context.h"

namespace mgpu::pipeline::detail {

// Everything a forward of (micro-batch, chunk) keeps for its backward.
struct Stash {
  Tensor input;  // the chunk's input: the embedding output or the received activation
  std::vector<BlockActivations> blocks;
  std::optional<HeadActivations> head;
  int64_t bytes = 0;
  // Zero-bubble only: what B keeps for W (and the embedding's gradient, applied in W).
  std::vector<BlockWeightGradInputs> blocks_keep;
  std::optional<HeadWeightGradInputs> head_keep;
  Tensor embedding_grad;
};

// One stage's state during one step.
class StageRunner {
 public:
  StageRunner(StageModel& model, const Schedule& schedule,
              const std::vector<data::Batch>& microbatches, comm::Comm& comm,
              const ExecutorOptions& options);

  StageStepStats run();

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  int virtual_stage(int chunk) const { return schedule_.virtual_stage(model_.stage, chunk); }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const {
    return virtual_stage(chunk) == schedule_.num_virtual_stages() - 1;
  }
  Shape activation_shape(int microbatch) const {
    return pipeline::activation_shape(microbatches_.at(microbatch), model_.config,
                                      model_.shard.seq_parts);
  }
  Shape whole_sequence_shape(int microbatch) const {
    return pipeline::activation_shape(microbatches_.at(microbatch), model_.config);
  }

  void execute(const Action& a);
  void charge_theory_time(double whole_stage_cost);
  void forward(int mb, int chunk);
  // Sequence parallelism at the pipeline's ends (executor_sequence_parallel.cpp).
  void embed(int mb, Tensor& mine);
  Tensor gather_sequence(const Tensor& mine, int mb, MemCategory category);
  Tensor keep_my_tokens_of(const Tensor& whole, int mb);
  void backward(int mb, int chunk, bool input_only);
  // Zero-bubble's B under recompute, and its W (executor_zero_bubble.cpp).
  void backward_input_recomputed(const Block& block, Tensor& grad, BlockActivations& kept,
                                 BlockWeightGradInputs& keep);
  void backward_weight(int mb, int chunk);
  void release(int mb, int chunk);

  int64_t activation_bytes() const {
    return ctx_.allocator.stats().current[static_cast<int>(MemCategory::activations)];
  }

  StageModel& model_;
  const Schedule& schedule_;
  const std::vector<data::Batch>& microbatches_;
  const ExecutorOptions& options_;
  RankContext& ctx_;
  std::map<Key, Stash> stashes_;
  StageP2P p2p_;  // declared after the stashes: gone first at the end, as its sends are waited
  int awaiting_backward_ = 0;  // forwards whose B has not run yet (what the theory counts)
  StageStepStats stats_;
};

}  // namespace mgpu::pipeline::detail

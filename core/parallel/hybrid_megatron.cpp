// Megatron-LM's tensor-parallel choices in the hybrid engine (see HybridOptions): the TP sums'
// type, sequence parallelism in the blocks, the vocabulary-parallel head. The pieces are the
// sequence_parallel and vocab_parallel layouts'; this file checks the options and builds the
// blocks' communication from them.
#include <stdexcept>

#include <fmt/format.h>

#include "core/parallel/hybrid.h"
#include "core/parallel/hybrid_megatron.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/vocab_parallel.h"

namespace mgpu::parallel {

std::string megatron_options_refusal(const GPTConfig& cfg, const HybridOptions& o) {
  const int tp = o.mesh.tp;
  if (o.sequence_parallel) {
    if (tp < 2)
      return "--sp splits the sequence over the tensor-parallel group: use --tp 2 or more, or "
             "drop --sp";
    if (o.mesh.cp > 1)
      return "--sp with --cp > 1 is not supported (both split the sequence): drop one of them";
    if (splits_backward(o.schedule))
      return fmt::format(
          "--sp has no split backward for {}'s B and W: use --schedule 1f1b, gpipe or "
          "interleaved, or drop --sp",
          o.schedule);
    if (cfg.experts > 0)
      return "--sp with experts is not supported (the MoE blocks route whole sequences): drop "
             "--sp";
    try {
      check_sp_size(cfg, tp, cfg.seq_len);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  }
  if (o.vocab_parallel_head) {
    if (tp < 2)
      return "the vocabulary-parallel head splits lm_head over the tensor-parallel group: use "
             "--tp 2 or more, or drop --vocab-parallel-head";
    try {
      check_vocab_parallel(cfg, tp);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  }
  return {};
}

void check_megatron_options(const GPTConfig& cfg, const HybridOptions& options) {
  const std::string refusal = megatron_options_refusal(cfg, options);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

std::unique_ptr<TensorParallelComm> make_tp_comm(comm::Comm& tp, const TpSeams& seams,
                                                 const HybridOptions& o) {
  if (o.sequence_parallel) return std::make_unique<SequenceParallelComm>(tp, seams, o.tp_sums);
  return std::make_unique<TensorParallelComm>(tp, seams, o.tp_sums);
}

void sum_layernorm_grads_over_tp(pipeline::StageModel& stage, comm::Comm& tp) {
  std::vector<Block*> blocks;
  for (auto& chunk : stage.chunks)
    for (Block& block : chunk) blocks.push_back(&block);
  all_reduce_layernorm_grads(blocks, tp);
}

}  // namespace mgpu::parallel

// The hybrid engine's Megatron-LM options, built (core/parallel/hybrid_megatron.cpp).
#pragma once
#include <memory>
#include <string>

#include "core/parallel/hybrid.h"

namespace mgpu::parallel {

// Why the hybrid engine cannot run `options`' Megatron choices for `cfg` (one line, what would
// work), or empty when it can: check_megatron_options throws it, the planner asks it.
std::string megatron_options_refusal(const GPTConfig& cfg, const HybridOptions& options);

// The blocks' linears' communication: TP's f and g, or (--sp) SP's halves of them, summing
// partial results as options.tp_sums says.
std::unique_ptr<TensorParallelComm> make_tp_comm(comm::Comm& tp, const TpSeams& seams,
                                                 const HybridOptions& options);
// --sp: the layernorms of the stage's blocks saw only this rank's tokens; their gradients are
// summed over the tp group.
void sum_layernorm_grads_over_tp(pipeline::StageModel& stage, comm::Comm& tp);

}  // namespace mgpu::parallel

// The hybrid engine's Megatron-LM options, built (core/parallel/hybrid_megatron.cpp).
#pragma once
#include <memory>

#include "core/parallel/hybrid.h"

namespace mgpu::parallel {

// The blocks' linears' communication: TP's f and g, or (--sp) SP's halves of them, summing
// partial results as options.tp_sums says.
std::unique_ptr<TensorParallelComm> make_tp_comm(comm::Comm& tp, const TpSeams& seams,
                                                 const HybridOptions& options);
// --sp: the layernorms of the stage's blocks saw only this rank's tokens; their gradients are
// summed over the tp group.
void sum_layernorm_grads_over_tp(pipeline::StageModel& stage, comm::Comm& tp);

}  // namespace mgpu::parallel

// Gradients synchronised as one flat buffer: the parameters' gradients packed back to back, one
// all-reduce over the group, unpacked. One collective instead of one per tensor (the ring's
// 2(n-1)/n x the gradient bytes either way, but one latency and one event on the timeline).
#pragma once
#include "core/comm/comm.h"
#include "core/model/param.h"

namespace mgpu::parallel {

// Every member passes its parameters in the same order, with gradients of the same shapes.
void all_reduce_gradients(const ParamList& params, comm::Comm& group,
                          comm::ReduceOp op = comm::ReduceOp::sum);

}  // namespace mgpu::parallel

// The probe of exercise 01 (see exercise_table.inc): a ring all-reduce needs a group to run in,
// so it is called on a tiny two-rank world of threads. A stub throws ex::NotImplemented on every
// rank before sending anything; that cause is what the caller sees.
#pragma once
#include <exception>

#include "core/comm/comm.h"
#include "core/runtime/world.h"
#include "core/tensor/tensor.h"

namespace mgpu::ex {

inline void probe_all_reduce(void (*all_reduce)(comm::Comm&, Tensor&, comm::ReduceOp)) {
  WorldOptions options;
  options.ranks = 2;
  options.backend = "local";
  options.trace = false;
  options.comm_timeout = 10;  // a probe that hangs is reported, not waited on forever
  World world(options);
  try {
    world.run([&](RankContext& ctx) {
      Tensor t = Tensor::from({3}, {1.0f, 2.0f, 3.0f});
      all_reduce(*ctx.comm, t, comm::ReduceOp::sum);
    });
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
}

}  // namespace mgpu::ex

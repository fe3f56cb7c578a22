// The probe of exercise 01 (see exercise_table.inc): a ring all-reduce needs a group to run in,
// so it is called on a tiny two-rank world of threads. A stub throws ex::NotImplemented on every
// rank before sending anything; that cause is what the caller sees.
#pragma once
#include <exception>
#include <functional>
#include <vector>

#include "core/comm/comm.h"
#include "core/parallel/zero.h"
#include "core/tensor/tensor.h"
#include "core/world/world.h"

namespace mgpu::ex {

// Runs `body` on a tiny world of `ranks` threads and rethrows the first rank's own exception (a
// stub's ex::NotImplemented), so the caller sees the cause, not the world's wrapper.
inline void run_probe(int ranks, const std::function<void(RankContext&)>& body) {
  WorldOptions options;
  options.ranks = ranks;
  options.backend = "local";
  options.trace = false;
  options.comm_timeout = 10;  // a probe that hangs is reported, not waited on forever
  World world(options);
  try {
    world.run(body);
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
}

inline void probe_all_reduce(void (*all_reduce)(comm::Comm&, Tensor&, comm::ReduceOp)) {
  run_probe(2, [&](RankContext& ctx) {
    Tensor t = Tensor::from({3}, {1.0f, 2.0f, 3.0f});
    all_reduce(*ctx.comm, t, comm::ReduceOp::sum);
  });
}

// The probe of exercise 06: the column-parallel forward on a one-rank group (f and the local
// linear, nothing to wait for).
using ColumnForward = void (*)(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               parallel::LinearCollectives&);
inline void probe_column_parallel(ColumnForward column_forward) {
  run_probe(1, [&](RankContext& ctx) {
    Tensor x = Tensor::from({1, 1, 2}, {1.0f, 2.0f});
    Tensor w = Tensor::from({2, 2}, {1.0f, 0.0f, 0.0f, 1.0f});
    Tensor b = Tensor::from({2}, {0.0f, 0.0f});
    Tensor y = Tensor::zeros({1, 1, 2}, MemCategory::activations);
    parallel::TensorParallelCollectives tp(*ctx.comm);
    column_forward(y, x, w, b, tp);
  });
}

// The probe of exercise 08: the sharded step on a one-rank group with one small unit.
using ShardedStep = void (*)(comm::Comm&, const std::vector<parallel::FlatUnit>&,
                             const std::function<void()>&);
inline void probe_sharded_step(ShardedStep sharded_step) {
  run_probe(1, [&](RankContext& ctx) {
    std::vector<parallel::FlatUnit> units = {
        {Tensor::from({3}, {1.0f, 2.0f, 3.0f}), Tensor::from({3}, {0.5f, 0.5f, 0.5f})}};
    sharded_step(*ctx.comm, units, [] {});
  });
}

}  // namespace mgpu::ex

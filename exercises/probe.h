// The probe of exercise 01 (see exercise_table.inc): a ring all-reduce needs a group to run in,
// so it is called on a tiny two-rank world of threads. A stub throws ex::NotImplemented on every
// rank before sending anything; that cause is what the caller sees.
#pragma once
#include <exception>
#include <functional>
#include <vector>

#include "core/comm/comm.h"
#include "core/parallel/zero.h"
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

// The probe of exercise 06: the column-parallel forward on a one-rank group (f and the local
// linear, nothing to wait for).
using ColumnForward = void (*)(Tensor&, const Tensor&, const Tensor&, const Tensor&, comm::Comm&);
inline void probe_column_parallel(ColumnForward column_forward) {
  WorldOptions options;
  options.ranks = 1;
  options.backend = "local";
  options.trace = false;
  options.comm_timeout = 10;
  World world(options);
  try {
    world.run([&](RankContext& ctx) {
      Tensor x = Tensor::from({1, 1, 2}, {1.0f, 2.0f});
      Tensor w = Tensor::from({2, 2}, {1.0f, 0.0f, 0.0f, 1.0f});
      Tensor b = Tensor::from({2}, {0.0f, 0.0f});
      Tensor y = Tensor::zeros({1, 1, 2}, MemCategory::activations);
      column_forward(y, x, w, b, *ctx.comm);
    });
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
}

// The probe of exercise 08: the sharded step on a one-rank group with one small unit.
using ShardedStep = void (*)(comm::Comm&, const std::vector<parallel::FlatUnit>&,
                             const std::function<void()>&);
inline void probe_sharded_step(ShardedStep sharded_step) {
  WorldOptions options;
  options.ranks = 1;
  options.backend = "local";
  options.trace = false;
  options.comm_timeout = 10;
  World world(options);
  try {
    world.run([&](RankContext& ctx) {
      std::vector<parallel::FlatUnit> units = {
          {Tensor::from({3}, {1.0f, 2.0f, 3.0f}), Tensor::from({3}, {0.5f, 0.5f, 0.5f})}};
      sharded_step(*ctx.comm, units, [] {});
    });
  } catch (const RankError& e) {
    if (e.cause()) std::rethrow_exception(e.cause());
    throw;
  }
}

}  // namespace mgpu::ex

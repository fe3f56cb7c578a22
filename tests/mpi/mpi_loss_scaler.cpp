// Run under mpirun -n K: the loss scaler's found-inf flag is all-reduced over MPI, so when only
// the last process overflows every process skips the same step and halves its scale; a clean
// step afterwards is taken everywhere. Exits non-zero on any disagreement.
#include <cstdio>
#include <limits>

#include "core/comm/comm.h"
#include "core/optim/mixed_precision.h"
#include "core/runtime/world.h"

namespace mgpu::reference {
void install_seams();  // the reference ring all-reduce, which every backend's all_reduce runs
}

using namespace mgpu;

int main() {
  WorldOptions o;
  o.backend = "mpi";
  o.comm_timeout = 20;
  mgpu::reference::install_seams();
  World world(o);
  int failures = 0;
  world.run([&](RankContext& ctx) {
    Param p("w", {4});
    p.data.fill(1.0f);
    optim::SGD opt(ParamList{&p}, optim::SGDOptions{.lr = 1.0f, .momentum = 0.0f});
    optim::LossScaler scaler;
    const bool overflow = ctx.rank == ctx.world_size - 1;
    p.grad.fill(overflow ? std::numeric_limits<float>::infinity() : 1.0f);
    const bool stepped = scaler.step(opt, {ctx.comm});
    if (stepped || scaler.scale() != 32768.0f || p.data.to_vector()[0] != 1.0f) {
      std::fprintf(stderr, "rank %d did not skip the overflowed step\n", ctx.rank);
      ++failures;
    }
    p.grad.fill(32768.0f);  // clean, computed with scale 2^15: the step subtracts 1
    if (!scaler.step(opt, {ctx.comm}) || p.data.to_vector()[0] != 0.0f) {
      std::fprintf(stderr, "rank %d did not take the clean step\n", ctx.rank);
      ++failures;
    }
  });
  if (failures == 0) std::printf("loss scaler: every rank skipped the same step\n");
  return failures == 0 ? 0 : 1;
}

// Run under mpirun -n K: the loss scaler's found-inf flag is all-reduced over MPI, so when only
// the last process overflows every process skips the same step and halves its scale; a clean
// step afterwards is taken everywhere. Then the same through the one training loop: fp16 DDP
// with an overflow injected on the last process at step 1, which every process must skip.
// Exits non-zero on any disagreement.
#include <cstdio>
#include <limits>

#include "common/overflow.h"
#include "core/comm/comm.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/ddp.h"
#include "core/train/trainer.h"
#include "core/world/world.h"
#include "exercises/exercises.h"  // the reference ring all-reduce and DDP's bucket assignment

using namespace mgpu;

int main() {
  WorldOptions o;
  o.backend = "mpi";
  o.comm_timeout = 20;
  o.all_reduce = &reference::ring_all_reduce;
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

  // fp16 DDP on the trainer: 3 steps, step 1 overflows on the last process only.
  GPTConfig cfg;
  cfg.layers = 2;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.seq_len = 8;
  auto task = data::make_task("markov", 1, {.seq_len = 8});
  cfg.vocab = task->vocab_size();
  cfg.dtype = DType::f16;
  train::TrainOptions t;
  t.steps = 3;
  t.global_batch = 2 * world.size();
  t.seq = 8;
  t.loss_scaling = mgpu::testing::overflow_at({{1, world.size() - 1}});
  train::train(
      world, *task, t,
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        return parallel::ddp_layout(
            cfg, *ctx.comm, parallel::DdpOptions{}, 1,
            [](const ParamList& params) {
              return optim::make_adamw(optim::whole_params(params), DType::f16);
            },
            ctx.rank, reference::seams().ddp);
      },
      {},
      [&](RankContext& ctx, train::Layout& layout) {
        const optim::LossScaler& s = *layout.loss_scaler();
        if (s.skipped_steps() != 1 || s.scale() != 32768.0f ||
            layout.optimizer()->step_count() != 2) {
          std::fprintf(stderr,
                       "rank %d: trainer run skipped %lld steps (scale %g, %lld optimizer steps); "
                       "expected step 1 skipped everywhere\n",
                       ctx.rank, static_cast<long long>(s.skipped_steps()), s.scale(),
                       static_cast<long long>(layout.optimizer()->step_count()));
          ++failures;
        }
      });
  if (failures == 0) std::printf("loss scaler: every rank skipped the same step\n");
  return failures == 0 ? 0 : 1;
}

// core/theory: the closed forms every lesson, the planner's screen and the exercise references
// print or rank with. Each holds to its source: the ring's 2(n-1)/n, the bytes per parameter the
// runs keep, the ZeRO paper's Figure 1, the GPT's parameter count as the model builds it, and
// the pipeline's sends and screen bubbles at small sizes worked by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/theory/collectives.h"
#include "core/theory/mesh_traffic.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"
#include "lessons/training.h"

namespace test_theory {

using namespace mgpu;

TEST_CASE("ring collectives send 2(n-1)/n of an all-reduce and (n-1)/n of a shard", "[theory]") {
  CHECK(theory::ring_all_reduce_factor(1) == 0.0);
  CHECK(theory::ring_all_reduce_factor(2) == 1.0);
  CHECK(theory::ring_all_reduce_factor(4) == 1.5);
  CHECK(theory::ring_shard_factor(4) == 0.75);
  for (int n = 1; n <= 64; ++n)
    CHECK(theory::ring_all_reduce_factor(n) == 2 * theory::ring_shard_factor(n));
  // alpha-beta: 8 ranks, 1 GB at 100 GB/s and 1 us per hop: 1.75 x 10 ms + 14 us.
  CHECK(theory::ring_all_reduce_seconds(1e9, 8, 100e9, 1e-6) == Approx(0.0175 + 14e-6));
  CHECK(theory::ring_all_reduce_seconds(1e9, 1, 100e9, 1e-6) == 0.0);
}

TEST_CASE("model states cost 16 B/param in fp32 AdamW, 18 mixed, 12 with SGD", "[theory]") {
  CHECK(theory::model_state_bytes(4, "adamw").total() == 16);
  CHECK(theory::model_state_bytes(2, "adamw").total() == 18);
  CHECK(theory::model_state_bytes(2, "adamw").optimizer == 12);  // fp32 master + m + v
  CHECK(theory::model_state_bytes(4, "sgd").total() == 12);
  CHECK(theory::model_state_bytes(2, "adamw").grads == 4);  // gradients stay fp32
}

TEST_CASE("ZeRO model states reproduce the paper's Figure 1 (7.5B, 64 GPUs, K = 12)", "[theory]") {
  const theory::StateBytes paper{2, 2, 12};
  const double published_gb[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const double gb = theory::zero_model_states(stage, paper, 7.5e9, 64).total() / 1e9;
    CHECK(std::round(gb * 10) / 10 == Approx(published_gb[stage]));
  }
  // Communication: stages 0-2 move 2 Psi like DDP, stage 3 1.5x that (the paper's section 7).
  const double ddp = theory::zero_bytes_sent(0, paper, 1e9, 8);
  CHECK(ddp == Approx(2 * 2e9 * 7 / 8));
  CHECK(theory::zero_bytes_sent(1, paper, 1e9, 8) == Approx(ddp));
  CHECK(theory::zero_bytes_sent(2, paper, 1e9, 8) == Approx(ddp));
  CHECK(theory::zero_bytes_sent(3, paper, 1e9, 8) == Approx(1.5 * ddp));
}

TEST_CASE("parameter counts equal the model the engine builds, whole, per tp split and stage",
          "[theory]") {
  for (auto [layers, dim, heads] : {std::tuple{2, 16, 2}, std::tuple{4, 64, 4}}) {
    GPTConfig cfg;
    cfg.layers = layers, cfg.dim = dim, cfg.heads = heads, cfg.seq_len = 32, cfg.vocab = 50;
    const int64_t built = lessons::count_params(cfg);
    CHECK(theory::gpt_parameters(cfg) == built);
    CHECK(theory::block_parameters(dim) == 12 * dim * dim + 13 * dim);
    const theory::TpParameterSplit split = theory::tp_parameter_split(cfg);
    CHECK(split.replicated + split.sharded == built);
    // Two stages without tp hold the whole model between them.
    const int64_t half = layers / 2;
    CHECK(theory::stage_parameters(cfg, half, 1, true, false) +
              theory::stage_parameters(cfg, layers - half, 1, false, true) ==
          built);
  }
}

TEST_CASE("pipeline sends, screen bubbles and micro-batches in flight by schedule", "[theory]") {
  // 4 stages, one chunk: the ends send once per micro-batch, the middle twice.
  CHECK(theory::pipeline_sends(0, 4, 1) == 1);
  CHECK(theory::pipeline_sends(1, 4, 1) == 2);
  CHECK(theory::pipeline_sends(3, 4, 1) == 1);
  // Two chunks: only virtual stage 0 and the last virtual stage miss a neighbour.
  CHECK(theory::pipeline_sends(0, 4, 2) == 3);
  CHECK(theory::pipeline_sends(3, 4, 2) == 3);
  CHECK(theory::bubble_in_microbatches("1f1b", 4, 1) == 3.0);
  CHECK(theory::bubble_in_microbatches("gpipe", 4, 1) == 3.0);
  CHECK(theory::bubble_in_microbatches("interleaved", 4, 2) == 1.5);
  CHECK(theory::bubble_in_microbatches("zb-h1", 4, 1) == Approx(1.0));  // (P-1)(F+B-2W)/(F+B)
  CHECK(theory::microbatches_in_flight("gpipe", 4, 1, 16) == 16);
  CHECK(theory::microbatches_in_flight("1f1b", 4, 1, 16) == 4);
  CHECK(theory::microbatches_in_flight("1f1b", 4, 1, 2) == 2);
  CHECK(theory::microbatches_in_flight("zb-h1", 4, 1, 16) == 7);
}

TEST_CASE("mesh traffic: dp all-reduce or ZeRO-1's reduce-scatter + all-gather", "[theory]") {
  const int64_t grads = 4000;  // fp32 gradients of 1,000 parameters
  CHECK(theory::dp_bytes_sent(4, grads, 4, false) == 1.5 * grads);
  // fp32 parameters: the reduce-scatter and the all-gather move what the all-reduce moves.
  CHECK(theory::dp_bytes_sent(4, grads, 4, true) == 1.5 * grads);
  // bf16 parameters: the all-gather moves half.
  CHECK(theory::dp_bytes_sent(4, grads, 2, true) == 0.75 * (grads + grads / 2));
  CHECK(theory::tp_bytes_sent(2, 4, 3, 2, 100) == 1.0 * 4 * 3 * 2 * 100);
  CHECK(theory::cp_bytes_sent(1, 3, 2, 100, false, 4, grads) == 0.0);
  // cp 2, no recompute: 2 K|V hops in 4 B plus 2 dK|dV hops in fp32 per layer and micro-batch.
  CHECK(theory::cp_bytes_sent(2, 1, 1, 100, false, 4, grads) == 2 * 100 * 4 + 2 * 100 * 4 + grads);
}

}  // namespace test_theory

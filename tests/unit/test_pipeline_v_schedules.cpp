// The V-shaped schedules (ZB-V, DualPipeV): their bubbles equal the closed forms of
// core/theory/pipeline_bubbles.h exactly (simulated over a grid, and measured by the
// executor in theory mode: test_pipeline_executor.cpp) and their activation peaks are the table's.
#include <catch2/catch.hpp>

#include "common/selected_seams.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/parallel/pipeline/validator.h"
#include "core/theory/pipeline_bubbles.h"

namespace test_pipeline_v_schedules {

using namespace mgpu;
using namespace mgpu::pipeline;

namespace {

// Every stage's idle time in the simulated step (all stages do the same work).
std::vector<double> idle_per_stage(const Schedule& s, const CostModel& costs) {
  const SimulationResult r = simulate_schedule(s, costs);
  std::vector<double> idle;
  for (double busy : r.busy_time) idle.push_back(r.makespan - busy);
  return idle;
}

}  // namespace

TEST_CASE("closed-form bubbles hold exactly over a grid of stages and micro-batches",
          "[pipeline][schedule]") {
  // Theory-mode unit costs: a whole stage's F = 1, B = 2 (B-input 1 + W 1); a chunk of a V
  // schedule is half a stage.
  const theory::ChunkCosts stage{1, 2, 1}, chunk{0.5, 1, 0.5};
  const CostModel stage_costs = CostModel::uniform(1, 1, 1);
  const CostModel chunk_costs = CostModel::uniform(0.5, 0.5, 0.5);
  for (int P = 2; P <= 8; ++P)
    for (int M = 2 * P; M <= 4 * P + 1; M += (P > 4 ? 3 : 1)) {
      CAPTURE(P, M);
      for (double idle : idle_per_stage(one_f_one_b_schedule(P, M, compute_orders()), stage_costs))
        CHECK(idle == theory::bubble_1f1b(P, stage));
      for (double idle : idle_per_stage(zb_h1_schedule(P, M), stage_costs))
        CHECK(idle == theory::bubble_zb1p(P, stage));
      const Schedule zbv = zbv_schedule(P, M), dpv = dualpipev_schedule(P, M);
      REQUIRE(validate_schedule(zbv).ok);
      REQUIRE(validate_schedule(dpv).ok);
      for (double idle : idle_per_stage(zbv, chunk_costs))
        CHECK(idle == theory::bubble_zbv(P, chunk));
      for (double idle : idle_per_stage(dpv, chunk_costs))
        CHECK(idle == theory::bubble_dualpipe(2 * P, chunk));  // DualPipeV: PP = 2P chunks
      // Activations (chunks held at the peak, on every stage): ZB-V PP, DualPipeV PP+1.
      for (int peak : peak_inflight_microbatches(zbv))
        CHECK(peak == theory::peak_chunks_1f1b(2 * P));
      for (int peak : peak_inflight_microbatches(dpv))
        CHECK(peak == theory::peak_chunks_dualpipe(2 * P));
    }
  // The smallest M each accepts is enough.
  for (int P = 2; P <= 6; ++P) {
    CHECK(validate_schedule(zbv_schedule(P, min_microbatches("zbv", P))).ok);
    CHECK(validate_schedule(dualpipev_schedule(P, min_microbatches("dualpipev", P))).ok);
  }
}

TEST_CASE("V placement: stage 0 holds the first and the last chunk, the turn is local",
          "[pipeline][schedule]") {
  const Schedule s = zbv_schedule(4, 8);
  CHECK(s.virtual_stage(0, 0) == 0);
  CHECK(s.virtual_stage(0, 1) == 7);
  CHECK(s.virtual_stage(3, 1) == 4);
  for (int v = 0; v < 8; ++v) CHECK(s.virtual_stage(s.stage_of(v), s.chunk_of(v)) == v);
  bool local_turn = false;
  for (const Action& a : s.actions[3])
    if (a.kind == ActionKind::send_activation && a.chunk == 0) local_turn = a.peer == 3;
  CHECK(local_turn);
}

TEST_CASE("DualPipe's bubble and activations equal its closed forms over a grid",
          "[pipeline][schedule]") {
  // DualPipe's chunk is a whole stage of one copy: F = 1, B = 2 (B-input 1 + W 1), PP = P.
  const theory::ChunkCosts stage{1, 2, 1};
  const CostModel stage_costs = CostModel::uniform(1, 1, 1);
  for (int P = 2; P <= 8; P += 2)
    for (int M = 2 * P; M <= 4 * P + 2; M += 2) {
      CAPTURE(P, M);
      const Schedule dp = dualpipe_schedule(P, M);
      REQUIRE(validate_schedule(dp).ok);
      for (double idle : idle_per_stage(dp, stage_costs))
        CHECK(idle == theory::bubble_dualpipe(P, stage));
      for (int peak : peak_inflight_microbatches(dp))
        CHECK(peak == theory::peak_chunks_dualpipe(P));
    }
  CHECK(validate_schedule(dualpipe_schedule(4, min_microbatches("dualpipe", 4))).ok);
}

TEST_CASE("DualPipe placement: two copies, micro-batches enter from both ends",
          "[pipeline][schedule]") {
  const Schedule s = dualpipe_schedule(4, 8);
  CHECK(s.num_virtual_stages() == 4);  // the model in P parts, each held twice
  for (int stage = 0; stage < 4; ++stage) {
    CHECK(s.virtual_stage(stage, 0) == stage);      // the down copy
    CHECK(s.virtual_stage(stage, 1) == 3 - stage);  // the up copy
  }
  // The down half (micro-batches 0-3) runs on chunk 0 and goes to the next stage, the up half
  // (4-7) on chunk 1 and goes to the previous one; stage 3 starts with the up half.
  for (int stage = 0; stage < 4; ++stage)
    for (const Action& a : s.actions[stage]) {
      CHECK((a.chunk == 0) == (a.microbatch < 4));
      if (a.kind == ActionKind::send_activation)
        CHECK(a.peer == (a.chunk == 0 ? stage + 1 : stage - 1));
    }
  CHECK(s.compute_actions(0).front() == forward(0, 0));
  CHECK(s.compute_actions(3).front() == forward(4, 1));
}

}  // namespace test_pipeline_v_schedules

// The schedule simulator against the closed-form theory: bubbles and peak activations.
#include <catch2/catch.hpp>

#include <iostream>

#include "common/selected_seams.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/parallel/pipeline/validator.h"

namespace test_pipeline_schedule_simulate {

using namespace mgpu::pipeline;

TEST_CASE("GPipe and 1F1B bubbles equal (P-1)/(M+P-1)", "[pipeline]") {
  for (double backward_cost :
       {1.0, 2.0}) {  // f = 1, b = 1 or 2: the fraction does not depend on it
    const CostModel costs = CostModel::uniform(1.0, backward_cost / 2, backward_cost / 2);
    for (int P = 1; P <= 6; ++P) {
      for (int M = 1; M <= 12; ++M) {
        INFO("P=" << P << " M=" << M << " b=" << backward_cost);
        const auto gpipe = simulate_schedule(gpipe_schedule(P, M, compute_orders()), costs);
        const auto one_f_one_b =
            simulate_schedule(one_f_one_b_schedule(P, M, compute_orders()), costs);
        const double theory = bubble_fraction_theory("gpipe", P, M);
        CHECK(gpipe.bubble_fraction == Approx(theory).margin(1e-9));
        CHECK(one_f_one_b.bubble_fraction == Approx(theory).margin(1e-9));
        CHECK(bubble_fraction_theory("1f1b", P, M) == theory);
        CHECK(gpipe.makespan == Approx((M + P - 1) * (1.0 + backward_cost)).margin(1e-9));
        CHECK(one_f_one_b.makespan == Approx(gpipe.makespan).margin(1e-9));
        for (int s = 0; s < P; ++s) CHECK(gpipe.idle_fraction[s] == Approx(theory).margin(1e-9));
      }
    }
  }
}

TEST_CASE("Naive model parallel bubble is (P-1)/P", "[pipeline]") {
  for (int P = 1; P <= 6; ++P) {
    const auto sim = simulate_schedule(naive_model_parallel_schedule(P));
    CHECK(sim.bubble_fraction == Approx(bubble_fraction_theory("naive", P, 1)).margin(1e-9));
  }
}

TEST_CASE("Interleaved bubble equals (P-1)/(V*M+P-1) for every M >= P, smaller than 1F1B",
          "[pipeline]") {
  int not_multiples = 0;
  for (int P = 1; P <= 6; ++P) {
    for (int M = P; M <= 13; ++M) {
      not_multiples += M % P != 0;
      const double one_f_one_b = bubble_fraction_theory("1f1b", P, M);
      for (int V = 1; V <= 3; ++V) {
        INFO("P=" << P << " M=" << M << " V=" << V);
        // Each chunk holds 1/V of the stage: forward 1/V, backward 2/V.
        const CostModel costs = CostModel::uniform(1.0 / V, 1.0 / V, 1.0 / V);
        const auto sim = simulate_schedule(interleaved_1f1b_schedule(P, M, V), costs);
        const double theory = bubble_fraction_theory("interleaved", P, M, V);
        CHECK(sim.bubble_fraction == Approx(theory).margin(1e-9));
        CHECK(sim.makespan == Approx(3.0 * M + 3.0 * (P - 1) / V).margin(1e-9));
        if (P > 1 && V > 1) CHECK(sim.bubble_fraction < one_f_one_b);
      }
    }
  }
  CHECK(not_multiples > 30);  // the grid covers M % P != 0, not only Megatron's multiples
}

TEST_CASE("ZB-H1 bubble (F=B=W) equals theory, smaller than 1F1B and interleaved V=2",
          "[pipeline]") {
  const CostModel costs = CostModel::uniform(1.0, 1.0, 1.0);
  for (int P = 1; P <= 6; ++P) {
    for (int M = 1; M <= 12; ++M) {
      INFO("P=" << P << " M=" << M);
      const auto sim = simulate_schedule(zb_h1_schedule(P, M), costs);
      CHECK(sim.bubble_fraction == Approx(bubble_fraction_theory("zb-h1", P, M)).margin(1e-9));
      if (M >= P) CHECK(sim.makespan == Approx(3.0 * M + P - 1).margin(1e-9));
      const auto one_f_one_b =
          simulate_schedule(one_f_one_b_schedule(P, M, compute_orders()), costs);
      if (P > 1) CHECK(sim.bubble_fraction < one_f_one_b.bubble_fraction);
      if (P > 1 && M % P == 0)
        CHECK(sim.bubble_fraction < bubble_fraction_theory("interleaved", P, M, 2));
    }
  }
}

TEST_CASE("Peak in-flight activations: GPipe M, 1F1B min(P-s, M), interleaved per Megatron",
          "[pipeline]") {
  for (int P = 1; P <= 6; ++P) {
    for (int M = 1; M <= 12; ++M) {
      INFO("P=" << P << " M=" << M);
      const auto gpipe = peak_inflight_microbatches(gpipe_schedule(P, M, compute_orders()));
      const auto one_f_one_b =
          peak_inflight_microbatches(one_f_one_b_schedule(P, M, compute_orders()));
      CHECK(gpipe == peak_activations_theory("gpipe", P, M));
      CHECK(one_f_one_b == peak_activations_theory("1f1b", P, M));
      CHECK(peak_inflight_microbatches(zb_h1_schedule(P, M)) == one_f_one_b);
      for (int s = 0; s < P; ++s) {
        CHECK(gpipe[s] == M);
        CHECK(one_f_one_b[s] == std::min(P - s, M));
        if (M > P) CHECK(one_f_one_b[s] < gpipe[s]);
      }
      for (int V = 1; V <= 3 && M >= P; ++V)
        CHECK(peak_inflight_microbatches(interleaved_1f1b_schedule(P, M, V)) ==
              peak_activations_theory("interleaved", P, M, V));
    }
  }
  CHECK(peak_inflight_microbatches(one_f_one_b_schedule(4, 8, compute_orders())) ==
        std::vector<int>{4, 3, 2, 1});
  CHECK(peak_inflight_microbatches(gpipe_schedule(4, 8, compute_orders())) ==
        std::vector<int>{8, 8, 8, 8});
  // Stage 0 of interleaved P=4 V=2 holds 2*3 + 4 + 1 = 11 chunk-activations = 5.5 stages' worth.
  CHECK(peak_inflight_microbatches(interleaved_1f1b_schedule(4, 8, 2)) ==
        std::vector<int>{11, 9, 7, 5});
}

TEST_CASE("Links that cost time stretch the step", "[pipeline]") {
  for (int P = 1; P <= 5; ++P) {
    for (int M = 1; M <= 8; ++M) {
      INFO("P=" << P << " M=" << M);
      const double f = 1, b = 2, p2p = 0.25;
      // GPipe: the first activation crosses P-1 links, the last gradient crosses them back.
      const auto gpipe = simulate_schedule(gpipe_schedule(P, M, compute_orders()),
                                           CostModel::uniform(f, 1, 1, p2p));
      CHECK(gpipe.makespan == Approx((M + P - 1) * (f + b) + 2 * (P - 1) * p2p).margin(1e-9));
      // 1F1B waits on a round trip in steady state too: never faster than with free links.
      const auto free = simulate_schedule(one_f_one_b_schedule(P, M, compute_orders()),
                                          CostModel::uniform(f, 1, 1));
      const auto slow = simulate_schedule(one_f_one_b_schedule(P, M, compute_orders()),
                                          CostModel::uniform(f, 1, 1, p2p));
      CHECK(slow.makespan >= free.makespan + 2 * (P - 1) * p2p - 1e-9);
    }
  }
}

TEST_CASE("Simulating a deadlocked schedule throws", "[pipeline]") {
  const Schedule s = with_communication("bad", 2, 2, 1,
                                        {{forward(0), backward(0), forward(1), backward(1)},
                                         {forward(0), forward(1), backward(0), backward(1)}});
  CHECK_THROWS_AS(simulate_schedule(s), ScheduleError);
}

TEST_CASE("render_schedule draws the plan", "[pipeline]") {
  const std::string gpipe =
      render_schedule(gpipe_schedule(2, 2, compute_orders()), CostModel::uniform(1, 0.5, 0.5));
  CHECK(gpipe ==
        "gpipe: P=2 M=2 V=1, step 6, bubble 33.3%\n"
        "stage 0 | F0 F1 .. .. B0 B1\n"
        "stage 1 | .. F0 F1 B0 B1 ..\n");
  const std::string one_f_one_b = render_schedule(one_f_one_b_schedule(2, 3, compute_orders()));
  CHECK(one_f_one_b ==
        "1f1b: P=2 M=3 V=1, step 12, bubble 25.0%\n"
        "stage 0 | F0 F1 .. .. B0 bb F2 B1 bb .. B2 bb\n"
        "stage 1 | .. F0 B0 bb F1 B1 bb F2 B2 bb .. ..\n");
  // Print the headline schedules so a teacher can paste them (visible with -s).
  for (const auto& s :
       {gpipe_schedule(4, 8, compute_orders()), one_f_one_b_schedule(4, 8, compute_orders()),
        interleaved_1f1b_schedule(4, 8, 2), zb_h1_schedule(4, 8)}) {
    const std::string text = render_schedule(s);
    CHECK(text.find("stage 3 |") != std::string::npos);
    std::cout << text << "\n";
  }
}

}  // namespace test_pipeline_schedule_simulate

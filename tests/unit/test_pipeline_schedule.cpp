// Pipeline schedule generators: exact action lists written out by hand, and config errors.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include "common/selected_seams.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/pipeline/validator.h"
#include "exercises/exercises.h"

namespace test_pipeline_schedule {

using namespace mgpu::pipeline;

namespace {
// "F0 F1 B0 B1": the compute actions of one stage, messages left out.
std::string compute_order(const Schedule& s, int stage) {
  std::vector<std::string> names;
  for (const Action& a : s.compute_actions(stage)) names.push_back(a.str());
  return fmt::format("{}", fmt::join(names, " "));
}
std::string all_actions(const Schedule& s, int stage) {
  std::vector<std::string> names;
  for (const Action& a : s.actions[stage]) names.push_back(a.str());
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

TEST_CASE("Action::str names the action", "[pipeline]") {
  CHECK(forward(3).str() == "F3");
  CHECK(backward(3).str() == "B3");
  CHECK(forward(3, 1).str() == "F3c1");
  CHECK(backward_weight(2).str() == "W2");
  CHECK(Action{ActionKind::send_activation, 3, 0, 2}.str() == "send_act mb3 -> s2");
  CHECK(Action{ActionKind::recv_grad, 1, 0, 3}.str() == "recv_grad mb1 <- s3");
}

TEST_CASE("GPipe P=2 M=2: full action lists", "[pipeline]") {
  const Schedule s = gpipe_schedule(2, 2, compute_orders());
  CHECK(s.name == "gpipe");
  CHECK(all_actions(s, 0) ==
        "F0, send_act mb0 -> s1, F1, send_act mb1 -> s1, "
        "recv_grad mb0 <- s1, B0, recv_grad mb1 <- s1, B1");
  CHECK(all_actions(s, 1) ==
        "recv_act mb0 <- s0, F0, recv_act mb1 <- s0, F1, "
        "B0, send_grad mb0 -> s0, B1, send_grad mb1 -> s0");
}

TEST_CASE("1F1B P=2 M=3: warmup, steady, cooldown", "[pipeline]") {
  const Schedule s = one_f_one_b_schedule(2, 3, compute_orders());
  CHECK(compute_order(s, 0) == "F0 F1 B0 F2 B1 B2");
  CHECK(compute_order(s, 1) == "F0 B0 F1 B1 F2 B2");
  CHECK(all_actions(s, 0) ==
        "F0, send_act mb0 -> s1, F1, send_act mb1 -> s1, recv_grad mb0 <- s1, B0, "
        "F2, send_act mb2 -> s1, recv_grad mb1 <- s1, B1, recv_grad mb2 <- s1, B2");
}

TEST_CASE("1F1B P=4 M=8: first and last stage", "[pipeline]") {
  const Schedule s = one_f_one_b_schedule(4, 8, compute_orders());
  CHECK(compute_order(s, 0) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(compute_order(s, 1) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  CHECK(compute_order(s, 3) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST_CASE("1F1B with fewer micro-batches than stages is all warmup", "[pipeline]") {
  const Schedule s = one_f_one_b_schedule(4, 2, compute_orders());
  CHECK(compute_order(s, 0) == "F0 F1 B0 B1");
  CHECK(compute_order(s, 3) == "F0 B0 F1 B1");
}

TEST_CASE("Interleaved 1F1B P=2 M=4 V=2: Megatron order per stage", "[pipeline]") {
  const Schedule s = interleaved_1f1b_schedule(2, 4, 2);
  // Stage 0 warmup: 2(P-s-1) + (V-1)P = 4 chunk-forwards, groups of P=2 micro-batches per chunk.
  CHECK(compute_order(s, 0) ==
        "F0 F1 F0c1 F1c1 "                  // warmup
        "F2 B0c1 F3 B1c1 F2c1 B0 F3c1 B1 "  // steady: one forward, one backward
        "B2c1 B3c1 B2 B3");                 // cooldown
  CHECK(compute_order(s, 1) ==
        "F0 F1 "
        "F0c1 B0c1 F1c1 B1c1 F2 B0 F3 B1 F2c1 B2c1 F3c1 B3c1 "
        "B2 B3");
  // Chunk 1 of stage 0 is virtual stage 2: it receives from stage 1 (virtual stage 1).
  CHECK(all_actions(s, 0).find("recv_act mb0c1 <- s1, F0c1, send_act mb0c1 -> s1") !=
        std::string::npos);
  // Chunk 1 of stage 1 is the last virtual stage: no send after its forward.
  CHECK(all_actions(s, 1).find("recv_act mb0c1 <- s0, F0c1, B0c1, send_grad mb0c1 -> s0") !=
        std::string::npos);
}

TEST_CASE("ZB-H1 P=3 M=4: 1F1B order with split backward, W lags s micro-batches", "[pipeline]") {
  const Schedule s = zb_h1_schedule(3, 4);
  CHECK(compute_order(s, 0) == "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
  CHECK(compute_order(s, 1) == "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3");
  CHECK(compute_order(s, 2) == "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
  CHECK(s.actions[0][0].kind == ActionKind::forward);
}

TEST_CASE("Naive model parallel: one batch down and back", "[pipeline]") {
  const Schedule s = naive_model_parallel_schedule(3);
  CHECK(s.microbatches == 1);
  CHECK(all_actions(s, 0) == "F0, send_act mb0 -> s1, recv_grad mb0 <- s1, B0");
  CHECK(all_actions(s, 1) ==
        "recv_act mb0 <- s0, F0, send_act mb0 -> s2, recv_grad mb0 <- s2, B0, send_grad mb0 -> s0");
  CHECK(all_actions(s, 2) == "recv_act mb0 <- s1, F0, B0, send_grad mb0 -> s1");
}

TEST_CASE("Interleaved 1F1B rounds: any M >= P in floor(M/P) near-equal rounds with larger first",
          "[pipeline]") {
  CHECK(interleaved_round_sizes(4, 8) == std::vector<int>{4, 4});  // Megatron's groups of P
  CHECK(interleaved_round_sizes(4, 10) == std::vector<int>{5, 5});
  CHECK(interleaved_round_sizes(4, 11) == std::vector<int>{6, 5});
  CHECK(interleaved_round_sizes(4, 7) == std::vector<int>{7});
  CHECK(interleaved_round_sizes(4, 2) == std::vector<int>{2});  // fewer than P: one short round
  for (int P = 1; P <= 6; ++P)
    for (int M = P; M <= 20; ++M) {
      const auto sizes = interleaved_round_sizes(P, M);
      int sum = 0;
      for (int g : sizes) {
        CHECK(g >= P);
        sum += g;
      }
      CHECK(sum == M);
      CHECK(sizes.front() - sizes.back() <= 1);
    }
}

TEST_CASE("Interleaved 1F1B P=2 M=5 V=2: rounds of 3 and 2 micro-batches", "[pipeline]") {
  const Schedule s = interleaved_1f1b_schedule(2, 5, 2);
  // Stage 0 warmup: 2(P-s-1) + (V-1)g0 = 2 + 3 = 5 chunk-forwards; round 0 is micro-batches 0-2,
  // round 1 is 3-4; each round runs chunk 0 then chunk 1 of its micro-batches.
  CHECK(compute_order(s, 0) ==
        "F0 F1 F2 F0c1 F1c1 "                         // warmup
        "F2c1 B0c1 F3 B1c1 F4 B2c1 F3c1 B0 F4c1 B1 "  // steady
        "B2 B3c1 B4c1 B3 B4");                        // cooldown
  CHECK(compute_order(s, 1) ==
        "F0 F1 F2 "
        "F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3 B0 F4 B1 F3c1 B2 F4c1 B3c1 "
        "B4c1 B3 B4");
}

TEST_CASE("make_schedule dispatches by name", "[pipeline]") {
  for (const auto& name : schedule_names()) {
    const Schedule s = make_schedule(name, 2, name == "naive" ? 1 : 4,
                                     name == "interleaved" ? 2 : 1, compute_orders());
    CHECK(s.name == name);
  }
  CHECK_THROWS_WITH(make_schedule("2f2b", 2, 4, 1, compute_orders()),
                    Catch::Contains("use one of naive, gpipe"));
}

TEST_CASE("Config errors are one clear line", "[pipeline]") {
  auto error = [](const std::string& name, int P, int M, int V, int layers) -> std::string {
    try {
      validate_pipeline_config(name, P, M, V, layers);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error("1f1b", 4, 8, 1, 3) ==
        "4 stages need at least 4 layers; the model has 3: use --stages 3 or fewer, or --layers 4");
  CHECK(error("gpipe", 2, 0, 1, 8) ==
        "micro-batches must be at least 1 (got 0): use --microbatches 1 or more");
  // Any M >= P works (rounds of at least P micro-batches); fewer than P is refused.
  CHECK(error("interleaved", 4, 10, 2, 16) == "");
  CHECK(error("interleaved", 4, 2, 2, 16) ==
        "interleaved 1F1B needs at least as many micro-batches as the 4 stages (got 2): use "
        "--microbatches 4 or more, or --schedule 1f1b");
  CHECK(error("interleaved", 4, 8, 3, 8) ==
        "interleaved with 4 stages x 3 chunks needs at least 12 layers; the model has 8: use "
        "--virtual-stages 2 or fewer, or --layers 12");
  CHECK(error("interleaved", 2, 4, 0, 8) ==
        "virtual stages must be at least 1 (got 0): use --virtual-stages 1, or 2 or more with "
        "--schedule interleaved");
  CHECK(error("pipedream", 2, 4, 1, 8) ==
        "unknown pipeline schedule 'pipedream': use one of naive, gpipe, 1f1b, interleaved, zb-h1, "
        "zbv, dualpipev, dualpipe");
  CHECK(error("dualpipe", 3, 6, 1, 8) ==
        "dualpipe needs an even number of stages (got 3): use --stages 2 or 4, or --schedule "
        "dualpipev");
  CHECK(error("dualpipe", 2, 3, 1, 8) ==
        "dualpipe with 2 stages needs an even number of micro-batches, at least 4 (got 3): use "
        "--microbatches 4");
  CHECK(error("1f1b", 2, 4, 2, 8).find("only applies to the interleaved schedule") !=
        std::string::npos);
  CHECK(error("naive", 2, 4, 1, 8).find("use --microbatches 1") != std::string::npos);
  for (const auto& message : {error("1f1b", 4, 8, 1, 3), error("interleaved", 4, 2, 2, 16)})
    CHECK(message.find('\n') == std::string::npos);
  CHECK_NOTHROW(validate_pipeline_config("interleaved", 4, 8, 2, 8));
  CHECK_NOTHROW(validate_pipeline_config("interleaved", 4, 7, 2, 8));
  CHECK_NOTHROW(validate_pipeline_config("1f1b", 4, 3, 1, 4));
}

TEST_CASE("partition_layers balances and flags uneven splits", "[pipeline]") {
  const LayerPartition uneven = partition_layers(8, 3);
  CHECK(uneven.ranges == std::vector<std::pair<int, int>>{{0, 3}, {3, 6}, {6, 8}});
  CHECK(uneven.uneven);
  CHECK(uneven.description == "stages have 3,3,2 layers (uneven)");
  const LayerPartition even = partition_layers(8, 4);
  CHECK(even.ranges == std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  CHECK_FALSE(even.uneven);
  CHECK(even.description == "stages have 2,2,2,2 layers");
  CHECK_THROWS_AS(partition_layers(2, 3), std::invalid_argument);
}

TEST_CASE("GPipe and 1F1B take their compute order from the exercise table passed in",
          "[pipeline]") {
  // The reference orders swapped: a schedule built with this table must follow it, not the
  // selection (the reference, here).
  const PipelineSeams swapped{"swapped", &mgpu::reference::one_f_one_b_compute_order,
                              &mgpu::reference::gpipe_compute_order};
  const Schedule gpipe = make_schedule("gpipe", 4, 8, 1, swapped);
  const Schedule one_f_one_b = make_schedule("1f1b", 4, 8, 1, swapped);
  CHECK(gpipe.name == "gpipe");
  for (int stage = 0; stage < 4; ++stage) {
    INFO("stage " << stage);
    CHECK(compute_order(gpipe, stage) ==
          compute_order(one_f_one_b_schedule(4, 8, compute_orders()), stage));
    CHECK(compute_order(one_f_one_b, stage) ==
          compute_order(gpipe_schedule(4, 8, compute_orders()), stage));
  }
  CHECK(validate_schedule(gpipe).ok);
  // The other schedules are core's own: the table does not change them.
  CHECK(compute_order(make_schedule("zb-h1", 4, 8, 1, swapped), 0) ==
        compute_order(make_schedule("zb-h1", 4, 8, 1, compute_orders()), 0));
  // A table without the function is one clear error, not a crash.
  try {
    make_schedule("1f1b", 2, 2, 1, PipelineSeams{});
    FAIL("no error");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()) == "pipeline schedule seam: 'one_f_one_b' is empty");
  }
}

}  // namespace test_pipeline_schedule

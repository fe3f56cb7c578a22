// The schedule validator: accepts every generated schedule, rejects planted mistakes with a
// message that names the stage and the offending action.
#include <catch2/catch.hpp>

#include <algorithm>

#include "common/selected_seams.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/validator.h"

namespace test_pipeline_schedule_validator {

using namespace mgpu::pipeline;

namespace {
int index_of(const std::vector<Action>& list, const Action& wanted) {
  auto it = std::find(list.begin(), list.end(), wanted);
  REQUIRE(it != list.end());
  return static_cast<int>(it - list.begin());
}
}  // namespace

TEST_CASE("Validator accepts every generated schedule on a grid", "[pipeline]") {
  int checked = 0;
  for (int P = 1; P <= 6; ++P) {
    const ValidationResult naive = validate_schedule(naive_model_parallel_schedule(P));
    INFO("naive P=" << P << "\n" << naive.message);
    CHECK(naive.ok);
    for (int M = 1; M <= 12; ++M) {
      for (const Schedule& s :
           {gpipe_schedule(P, M, compute_orders()), one_f_one_b_schedule(P, M, compute_orders()),
            zb_h1_schedule(P, M)}) {
        const ValidationResult r = validate_schedule(s);
        INFO(s.name << " P=" << P << " M=" << M << "\n" << r.message);
        CHECK(r.ok);
        ++checked;
      }
      for (int V = 1; V <= 3; ++V) {  // any M, multiples of P or not, and fewer than P
        const ValidationResult r = validate_schedule(interleaved_1f1b_schedule(P, M, V));
        INFO("interleaved P=" << P << " M=" << M << " V=" << V << "\n" << r.message);
        CHECK(r.ok);
        ++checked;
      }
    }
  }
  CHECK(checked > 250);
}

TEST_CASE("Validator: backward before forward", "[pipeline]") {
  Schedule s = one_f_one_b_schedule(2, 3, compute_orders());
  auto& list = s.actions[1];  // recv_act mb0, F0, B0, send_grad mb0, ...
  std::swap(list[index_of(list, forward(0))], list[index_of(list, backward(0))]);
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 1: B0 appears before F0"));
  CHECK_THROWS_AS(check_schedule(s), ScheduleError);
}

TEST_CASE("Validator: missing micro-batch", "[pipeline]") {
  Schedule s = gpipe_schedule(2, 6, compute_orders());
  auto& list = s.actions[0];
  std::erase_if(list, [](const Action& a) { return a.microbatch == 5; });
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 0: micro-batch 5 has no forward"));
  CHECK_THAT(r.message, Catch::Contains("stage 0: micro-batch 5 has no backward"));
  CHECK_THAT(r.message, Catch::Contains("stage 1: recv_act mb5 <- s0 has no matching send"));
}

TEST_CASE("Validator: duplicated forward", "[pipeline]") {
  Schedule s = one_f_one_b_schedule(3, 4, compute_orders());
  auto& list = s.actions[2];
  list.insert(list.begin() + index_of(list, forward(2)) + 1, forward(2));
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 2: F2 appears twice"));
}

TEST_CASE("Validator: recv without send", "[pipeline]") {
  Schedule s = one_f_one_b_schedule(2, 3, compute_orders());
  auto& list = s.actions[0];
  list.erase(list.begin() + index_of(list, {ActionKind::send_activation, 1, 0, 1}));
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 0: F1 is not followed by its send_activation"));
  CHECK_THAT(r.message, Catch::Contains("stage 1: recv_act mb1 <- s0 has no matching send"));
  CHECK_THAT(r.message, Catch::Contains("stage 1 blocked at recv_activation mb1 from stage 0"));
}

TEST_CASE("Validator: send without recv, wrong peer", "[pipeline]") {
  Schedule s = gpipe_schedule(3, 2, compute_orders());
  auto& list = s.actions[1];
  list[index_of(list, {ActionKind::send_activation, 0, 0, 2})].peer = 0;
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 1: send_act mb0 -> s0 talks to the wrong stage"));
  CHECK_THAT(r.message, Catch::Contains("stage 1: send_act mb0 -> s0 has no matching recv"));
}

TEST_CASE("Validator: swapping two recvs makes a circular wait", "[pipeline]") {
  // Stage 1 waits for the gradient of micro-batch 1 before forwarding it, but stage 2 can only
  // produce that gradient after receiving the forward activation of micro-batch 1.
  Schedule s = one_f_one_b_schedule(3, 3, compute_orders());
  auto& list = s.actions[1];
  std::swap(list[index_of(list, {ActionKind::recv_activation, 1, 0, 0})],
            list[index_of(list, {ActionKind::recv_grad, 1, 0, 2})]);
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 1 blocked at recv_grad mb1 from stage 2; "
                                        "stage 2 blocked at recv_activation mb1 from stage 1"));
  CHECK(find_deadlock(s).rfind("deadlock: ", 0) == 0);
}

TEST_CASE("Validator: a compute order that deadlocks with correct messages", "[pipeline]") {
  // Every local check passes; only executing the lists reveals the cycle: stage 0 wants B0 before
  // sending F1, stage 1 wants F1 before doing B0.
  const Schedule s = with_communication("bad", 2, 2, 1,
                                        {{forward(0), backward(0), forward(1), backward(1)},
                                         {forward(0), forward(1), backward(0), backward(1)}});
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK(r.message ==
        "deadlock: stage 0 blocked at recv_grad mb0 from stage 1; "
        "stage 1 blocked at recv_activation mb1 from stage 0");
}

TEST_CASE("Validator: zero-bubble W before B", "[pipeline]") {
  Schedule s = zb_h1_schedule(2, 2);
  auto& list = s.actions[1];
  std::swap(list[index_of(list, backward_input(0))], list[index_of(list, backward_weight(0))]);
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 1: W0 appears before B0"));
}

TEST_CASE("Validator: interleaved chunk missing", "[pipeline]") {
  Schedule s = interleaved_1f1b_schedule(2, 2, 2);
  std::erase_if(s.actions[0], [](const Action& a) { return a.chunk == 1 && a.microbatch == 1; });
  const ValidationResult r = validate_schedule(s);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("stage 0: micro-batch 1 chunk 1 has no forward"));
}

}  // namespace test_pipeline_schedule_validator

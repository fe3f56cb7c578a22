// Graded: exercise 03, pipeline compute orders (docs/exercises/03-pipeline-schedules.md).
// gpipe_compute_order(P, M) / one_f_one_b_compute_order(P, M) return each stage's compute actions
// in order; core adds the sends/recvs (with_communication) and validates the result (every
// micro-batch once, backward after forward, no deadlock).
//
// Compiles to the real checks only once the exercise's core seam is merged; before that this
// executable has no [grade] cases and CMake registers no grade_* tests for it.
#if __has_include("core/parallel/pipeline/seams.h")
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/pipeline/simulate.h"
#include "core/parallel/pipeline/validator.h"
#include "core/theory/pipeline_bubbles.h"
#include "exercises/exercises.h"
#include "grade/grade_support.h"

using namespace mgpu;
using pipeline::Action;
using pipeline::ActionKind;

namespace {

using Order = std::vector<std::vector<Action>>;

}  // namespace

// Failures print an order the way the lesson and the docs draw it: "stage 0: F0 F1 B0 B1 | ...".
namespace Catch {
template <>
struct StringMaker<Order> {
  static std::string convert(const Order& order) {
    std::string text;
    for (size_t s = 0; s < order.size(); ++s) {
      text += (s ? " | stage " : "stage ") + std::to_string(s) + ":";
      for (auto& action : order[s]) text += " " + action.str();
    }
    return order.empty() ? "no stages" : text;
  }
};
}  // namespace Catch

namespace {

Order gpipe(int p, int m) {
  if (grade::grading_mine("ex03")) return mine::gpipe_compute_order(p, m);
  return reference::gpipe_compute_order(p, m);
}

Order zbv(int p, int m) {
  if (grade::grading_mine("ex03")) return mine::zbv_compute_order(p, m);
  return reference::zbv_compute_order(p, m);
}

Order one_f_one_b(int p, int m) {
  if (grade::grading_mine("ex03")) return mine::one_f_one_b_compute_order(p, m);
  return reference::one_f_one_b_compute_order(p, m);
}

void check_valid(const std::string& name, int p, int m, const Order& order) {
  INFO(name << " P=" << p << " M=" << m);
  REQUIRE(order.size() == static_cast<size_t>(p));
  auto schedule = pipeline::with_communication(name, p, m, 1, order);
  auto result = pipeline::validate_schedule(schedule);
  INFO(result.message);
  CHECK(result.ok);
}

// Forwards in flight (done, backward not yet done) at the worst moment on one stage.
int peak_in_flight(const std::vector<Action>& stage) {
  int live = 0, peak = 0;
  for (auto& a : stage) {
    if (a.kind == ActionKind::forward) peak = std::max(peak, ++live);
    if (a.kind == ActionKind::backward) --live;
  }
  return peak;
}

}  // namespace

TEST_CASE("ex03 GPipe: all forwards then all backwards and a valid schedule (3 pts)",
          "[grade][ex03]") {
  for (int p = 1; p <= 4; ++p)
    for (int m : {1, 2, 4, 7}) {
      Order order = gpipe(p, m);
      check_valid("gpipe", p, m, order);
      for (auto& stage : order) CHECK(peak_in_flight(stage) == m);
    }
}

TEST_CASE("ex03 1F1B: a valid schedule with at most P-s forwards in flight (4 pts)",
          "[grade][ex03]") {
  for (int p = 1; p <= 4; ++p)
    for (int m : {1, 2, 4, 7}) {
      Order order = one_f_one_b(p, m);
      check_valid("1f1b", p, m, order);
      for (int s = 0; s < static_cast<int>(order.size()); ++s) {
        INFO("P=" << p << " M=" << m << " stage " << s);
        CHECK(peak_in_flight(order[s]) <= std::max(1, std::min(m, p - s)));
      }
    }
}

TEST_CASE("ex03 ZB-V: a V-shaped schedule that is deadlock-free at the closed-form bubble (3 pts)",
          "[grade][ex03]") {
  for (int p = 2; p <= 4; ++p)
    for (int m : {2 * p - 1, 2 * p, 3 * p + 1}) {
      INFO("zbv P=" << p << " M=" << m);
      Order order = zbv(p, m);
      REQUIRE(order.size() == static_cast<size_t>(p));
      const auto schedule =
          pipeline::with_communication("zbv", p, m, 2, order, pipeline::Placement::v_shape);
      const auto result = pipeline::validate_schedule(schedule);
      INFO(result.message);
      REQUIRE(result.ok);  // every (micro-batch, chunk) once, in order, no deadlock
      // F = B-input = W = 1 per chunk: every stage idles exactly (P-1) F.
      const auto sim = pipeline::simulate_schedule(schedule, pipeline::CostModel::uniform(1, 1, 1));
      for (int s = 0; s < p; ++s)
        CHECK(sim.makespan - sim.busy_time[s] == theory::bubble_zbv(p, {1, 2, 1}));
    }
}

TEST_CASE("ex03 compute orders equal the reference diagrams (2 pts)", "[grade][ex03]") {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      INFO("P=" << p << " M=" << m);
      CHECK(gpipe(p, m) == reference::gpipe_compute_order(p, m));
      CHECK(one_f_one_b(p, m) == reference::one_f_one_b_compute_order(p, m));
    }
}

#else
// The pipeline seam (core/parallel/pipeline/seams.h) is not in this build yet: no graded cases.
#endif

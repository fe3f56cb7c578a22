// Graded: exercise 10, the checkpoint interval (docs/exercises/10-checkpoint-interval.md).
// Young's formula on published figures, its optimum against core's seeded replay of a job under
// failures (core/theory/checkpoint_interval.h), and the work a failure loses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/theory/checkpoint_interval.h"
#include "exercises/exercises.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {

double interval(double cost, double mtbf) {
  return grade::grading_mine("ex10") ? mine::young_daly_interval(cost, mtbf)
                                     : reference::young_daly_interval(cost, mtbf);
}

ex::LostWork lost(int failed, int every, double step) {
  return grade::grading_mine("ex10") ? mine::lost_work(failed, every, step)
                                     : reference::lost_work(failed, every, step);
}

}  // namespace

TEST_CASE("ex10 the optimum interval is sqrt(2 C MTBF) (2 pts)", "[grade][ex10]") {
  CHECK(interval(60, 3600) == Approx(std::sqrt(2.0 * 60 * 3600)));
  CHECK(interval(1, 2) == Approx(2.0));
  // Llama 3: 419 unexpected interruptions in 54 days; a 60 s checkpoint.
  CHECK(interval(60, 54.0 * 24 * 3600 / 419) == Approx(1155.99).epsilon(1e-4));
}

TEST_CASE("ex10 the optimum wastes least in a replay under failures (2 pts)", "[grade][ex10]") {
  const double cost = 30, mtbf = 7200;
  const double best = interval(cost, mtbf);
  std::vector<double> waste;
  for (double x : {0.25, 0.5, 1.0, 2.0, 4.0})
    waste.push_back(
        theory::simulate_checkpointing(1000 * mtbf, x * best, cost, mtbf, 0, 7).waste());
  CHECK(std::min_element(waste.begin(), waste.end()) - waste.begin() == 2);
}

TEST_CASE("ex10 a failure loses the steps since the last checkpoint (2 pts)", "[grade][ex10]") {
  const ex::LostWork a = lost(6, 4, 0.5);
  CHECK(a.saved_step == 4);
  CHECK(a.seconds == Approx(1.0));
  const ex::LostWork b = lost(8, 4, 0.5);  // a checkpoint right before the step: nothing lost
  CHECK(b.saved_step == 8);
  CHECK(b.seconds == 0);
  const ex::LostWork c = lost(7, 0, 2.0);  // no checkpoints: start over
  CHECK(c.saved_step == 0);
  CHECK(c.seconds == Approx(14.0));
}

TEST_CASE("ex10 impossible inputs throw invalid_argument (1 pts)", "[grade][ex10]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(interval(0, 10), std::invalid_argument);
  CHECK_THROWS_AS(interval(10, -1), std::invalid_argument);
  CHECK_THROWS_AS(interval(nan, 10), std::invalid_argument);
  CHECK_THROWS_AS(lost(-1, 2, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(lost(3, -2, 1.0), std::invalid_argument);
}

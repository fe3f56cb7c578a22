// What the lessons show through exercise seams 04 and 05: the figures follow whatever is
// selected, so a deliberately wrong implementation changes them and the credit names it.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/memory/seams.h"
#include "core/trace/bubble_seams.h"
#include "exercises/exercises.h"
#include "exercises/selection.h"
#include "lessons/exercise_views.h"
#include "lessons/training.h"

namespace test_exercise_views {

using namespace mgpu;

namespace {

struct RestoreReference {
  ~RestoreReference() { ex::use_seams(reference::seams()); }
};

trace::Event event(int rank, trace::Lane lane, double start, double dur, int step = -1) {
  trace::Event e;
  e.name = lane == trace::Lane::step ? "step" : "F";
  e.cat = trace::cat::forward;
  e.rank = rank;
  e.lane = lane;
  e.start = start;
  e.dur = dur;
  e.step = step;
  return e;
}

// Two ranks, step 0 spans [0, 10]: rank 0 computes 8 of it, rank 1 computes 5 (two overlapping
// kernels, 3 + 3 overlapping by 1 -> 5).
trace::Trace two_rank_step() {
  trace::Trace t;
  t.num_ranks = 2;
  t.events = {event(0, trace::Lane::step, 0, 10, 0), event(1, trace::Lane::step, 0, 10, 0),
              event(0, trace::Lane::compute, 1, 8), event(1, trace::Lane::compute, 2, 3),
              event(1, trace::Lane::compute, 4, 3)};
  return t;
}

}  // namespace

TEST_CASE("measured_bubble_fractions uses the selected bubble accounting (exercise 04)",
          "[exercise_views]") {
  RestoreReference restore;
  const trace::Trace t = two_rank_step();
  const auto reference_view = lessons::measured_bubble_fractions(t, 0);
  REQUIRE(reference_view.size() == 2);
  CHECK(reference_view[0] == Approx(0.2));
  CHECK(reference_view[1] == Approx(0.5));
  CHECK(lessons::bubble_accounting_credit() == "exercise 04's bubble accounting (reference)");

  // A wrong accounting (sums durations instead of their union) shows through.
  ex::SeamTables wrong = reference::seams();
  wrong.bubble = {"mine", [](const trace::Trace& tr, double t0, double t1) {
                    std::vector<trace::RankIdle> out(tr.num_ranks);
                    for (int r = 0; r < tr.num_ranks; ++r) out[r].rank = r;
                    for (const auto& e : tr.events)
                      if (e.lane == trace::Lane::compute) out[e.rank].busy += e.dur;
                    for (auto& r : out) {
                      r.idle = (t1 - t0) - r.busy;
                      r.bubble_fraction = r.idle / (t1 - t0);
                    }
                    return out;
                  }};
  ex::use_seams(wrong);
  const auto wrong_view = lessons::measured_bubble_fractions(t, 0);
  CHECK(wrong_view[0] == Approx(0.2));
  CHECK(wrong_view[1] == Approx(0.4));
  CHECK(lessons::bubble_accounting_credit() == "exercise 04's bubble accounting (yours)");
}

TEST_CASE("print_memory_prediction uses the selected estimator (exercise 05) beside the measure",
          "[exercise_views]") {
  RestoreReference restore;
  lessons::MemoryRun run;
  run.model = GPTConfig{};
  const int64_t params = reference::gpt_param_count(run.model);
  MemoryStats measured;
  measured.peak[static_cast<int>(MemCategory::parameters)] = params * 4;

  std::ostringstream reference_out;
  lessons::print_memory_prediction(reference_out, run, measured);
  const std::string ref = reference_out.str();
  CHECK(ref.find("exercise 05's memory estimator (reference)") != std::string::npos);
  CHECK(ref.find(format_bytes(params * 4) + " = " + lessons::with_commas(params) + " x 4 B") !=
        std::string::npos);
  CHECK(ref.find(format_bytes(params * 8) + " = " + lessons::with_commas(params) + " x 8 B") !=
        std::string::npos);

  // A wrong estimator (forgets Adam's second moment) changes the prediction, not the measure.
  ex::SeamTables wrong = reference::seams();
  wrong.memory = {"mine", &reference::gpt_param_count, [](const ex::MemoryQuery& q) {
                    ex::MemoryEstimate e = reference::estimate_memory(q);
                    e.optimizer_state /= 2;
                    return e;
                  }};
  ex::use_seams(wrong);
  std::ostringstream mine_out;
  lessons::print_memory_prediction(mine_out, run, measured);
  const std::string mine = mine_out.str();
  CHECK(mine.find("exercise 05's memory estimator (yours)") != std::string::npos);
  CHECK(mine.find(format_bytes(params * 4) + " = " + lessons::with_commas(params) + " x 8 B") !=
        std::string::npos);
  CHECK(mine != ref);
}

}  // namespace test_exercise_views

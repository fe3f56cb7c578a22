// Graded: exercise 04, bubble accounting (docs/exercises/04-bubble-accounting.md).
// Small hand-made traces first, then random (seeded) traces checked against core's analysis
// (core/trace/analysis.h), which is the definition the lessons and the dashboard use.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "core/trace/analysis.h"
#include "exercises/exercises.h"
#include "grade/grade_support.h"

using namespace mgpu;
using trace::Lane;

namespace {

std::vector<ex::RankIdle> accounting(const trace::Trace& t, double t0, double t1) {
  return grade::grading_mine("ex04") ? mine::bubble_accounting(t, t0, t1)
                                     : reference::bubble_accounting(t, t0, t1);
}

trace::Event event(int rank, Lane lane, double start, double dur) {
  trace::Event e;
  e.name = "work";
  e.cat = lane == Lane::comm ? trace::cat::comm : trace::cat::forward;
  e.rank = rank;
  e.lane = lane;
  e.start = start;
  e.dur = dur;
  return e;
}

trace::Trace trace_of(int ranks, std::vector<trace::Event> events) {
  trace::Trace t;
  t.num_ranks = ranks;
  t.events = std::move(events);
  return t;
}

void check_rank(const ex::RankIdle& got, int rank, double busy, double span) {
  INFO("rank " << rank);
  CHECK(got.rank == rank);
  CHECK(got.busy == Approx(busy).margin(1e-9));
  CHECK(got.idle == Approx(span - busy).margin(1e-9));
  CHECK(got.bubble_fraction == Approx(span > 0 ? (span - busy) / span : 0.0).margin(1e-9));
}

// Random events on every lane: overlapping and nested compute events, zero-length ones, and
// events that start before / end after any window drawn from [0, 10].
trace::Trace random_trace(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> ranks_d(1, 5), count_d(0, 12), lane_d(0, 2);
  std::uniform_real_distribution<double> start_d(-2.0, 11.0), dur_d(0.0, 3.0);
  const int ranks = ranks_d(rng);
  std::vector<trace::Event> events;
  for (int r = 0; r < ranks; ++r) {
    const int count = count_d(rng);
    for (int i = 0; i < count; ++i) {
      auto lane = static_cast<Lane>(lane_d(rng));
      double dur = i % 7 == 3 ? 0.0 : dur_d(rng);
      events.push_back(event(r, lane, start_d(rng), dur));
    }
  }
  std::shuffle(events.begin(), events.end(), rng);  // no ordering is promised
  return trace_of(ranks, std::move(events));
}

void check_against_core(const trace::Trace& t, double t0, double t1) {
  INFO("window [" << t0 << ", " << t1 << "] over " << t.events.size() << " events on "
                  << t.num_ranks << " ranks");
  auto got = accounting(t, t0, t1);
  REQUIRE(got.size() == static_cast<size_t>(t.num_ranks));
  for (int r = 0; r < t.num_ranks; ++r) {
    double busy = trace::total_length(trace::lane_intervals(t, r, Lane::compute, {t0, t1}));
    check_rank(got[r], r, busy, t1 - t0);
  }
}

}  // namespace

TEST_CASE("ex04 disjoint compute events inside the window (2 pts)", "[grade][ex04]") {
  auto t = trace_of(1, {event(0, Lane::compute, 1, 2), event(0, Lane::compute, 4, 1)});
  auto got = accounting(t, 0, 10);
  REQUIRE(got.size() == 1);
  check_rank(got[0], 0, 3, 10);
}

TEST_CASE("ex04 overlapping and nested events on one lane count once (2 pts)", "[grade][ex04]") {
  auto t = trace_of(1, {event(0, Lane::compute, 0, 4), event(0, Lane::compute, 1, 1),
                        event(0, Lane::compute, 3, 3), event(0, Lane::compute, 8, 1)});
  auto got = accounting(t, 0, 10);
  REQUIRE(got.size() == 1);
  check_rank(got[0], 0, 7, 10);  // [0,6) and [8,9)
}

TEST_CASE("ex04 events crossing the window edges are clipped to it (2 pts)", "[grade][ex04]") {
  auto t = trace_of(1, {event(0, Lane::compute, -5, 7), event(0, Lane::compute, 9, 5),
                        event(0, Lane::compute, 20, 1)});
  auto got = accounting(t, 0, 10);
  REQUIRE(got.size() == 1);
  check_rank(got[0], 0, 3, 10);  // [0,2) and [9,10)
}

TEST_CASE("ex04 one entry per rank and only the compute lane is busy (1 pts)", "[grade][ex04]") {
  auto t = trace_of(
      3, {event(0, Lane::comm, 0, 5), event(0, Lane::step, 0, 10), event(2, Lane::compute, 2, 4)});
  auto got = accounting(t, 0, 10);
  REQUIRE(got.size() == 3);
  check_rank(got[0], 0, 0, 10);  // communication and the step marker are not compute
  check_rank(got[1], 1, 0, 10);  // no events at all: idle for the whole window
  check_rank(got[2], 2, 4, 10);
}

TEST_CASE("ex04 matches core's analysis on 300 random seeded traces (3 pts)", "[grade][ex04]") {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> edge(0.0, 10.0);
  for (int i = 0; i < 300; ++i) {
    trace::Trace t = random_trace(rng);
    double a = edge(rng), b = edge(rng);
    check_against_core(t, std::min(a, b), std::max(a, b));

    // The whole-trace window, as analyze() and the dashboard report it.
    trace::TraceSummary summary = trace::analyze(t);
    auto got = accounting(t, summary.window.begin, summary.window.end);
    REQUIRE(got.size() == summary.ranks.size());
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("trace " << i << " whole window, rank " << r);
      CHECK(got[r].idle == Approx(summary.ranks[r].idle).margin(1e-9));
      CHECK(got[r].bubble_fraction == Approx(summary.ranks[r].bubble_fraction).margin(1e-9));
    }
  }
}

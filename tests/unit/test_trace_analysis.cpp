// Trace analysis (exact interval arithmetic on hand-made traces), bandwidth factors, the memory
// timeline and the ASCII timeline.
#include <catch2/catch.hpp>

#include "common/trace_events.h"

#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline.h"

namespace test_trace_analysis {

using namespace mgpu::trace;

using mgpu::testing::make_event;

namespace {

Event compute(int rank, double start, double end, const char* category = cat::forward) {
  return make_event("k", category, rank, Lane::compute, start, end - start);
}

Event comm(int rank, double start, double end, const char* op, int64_t bytes) {
  Event e = make_event(op, cat::comm, rank, Lane::comm, start, end - start);
  e.op = op;
  e.bytes = bytes;
  return e;
}

Event step(int rank, int number, double start, double end) {
  Event e = make_event("step", cat::step, rank, Lane::step, start, end - start);
  e.step = number;
  return e;
}

// Rank 0: compute [0,2] and [1,3] overlap (count once), [5,6]; comm [2,4] all_reduce, [6,7] recv.
// Rank 1: compute [4,8]. Step 0 is [0,4], step 1 is [4,8].
Trace two_rank_trace() {
  Trace t;
  t.num_ranks = 2;
  t.events = {compute(0, 0, 2),
              compute(0, 1, 3),
              compute(0, 5, 6, cat::optimizer),
              comm(0, 2, 4, "all_reduce", 100),
              comm(0, 6, 7, "recv", 50),
              compute(1, 4, 8),
              step(0, 0, 0, 4),
              step(1, 0, 0.5, 4),
              step(0, 1, 4, 8),
              step(1, 1, 4, 8)};
  return t;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// 1F1B on `stages` ranks: forward 1 unit, backward 2, activation send 0.25 after each forward.
Trace one_f_one_b(int stages, int microbatches, double unit) {
  struct Op {
    bool forward;
    int mb;
  };
  std::vector<std::vector<Op>> order(stages);
  for (int s = 0; s < stages; ++s) {
    const int warmup = std::min(stages - s - 1, microbatches);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order[s].push_back({true, f});
    while (f < microbatches) order[s].push_back({true, f++}), order[s].push_back({false, b++});
    while (b < microbatches) order[s].push_back({false, b++});
  }
  std::map<std::tuple<int, bool, int>, double> end_of;  // (stage, forward, mb) -> end
  std::vector<double> free_at(stages, 0);
  std::vector<size_t> next(stages, 0);
  Trace t;
  t.num_ranks = stages;
  for (bool progress = true; progress;) {  // schedule any op whose input is ready
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < order[s].size()) {
        const Op op = order[s][next[s]];
        const auto dep = op.forward ? std::tuple(s - 1, true, op.mb)
                                    : (s == stages - 1 ? std::tuple(s, true, op.mb)
                                                       : std::tuple(s + 1, false, op.mb));
        const bool first = op.forward && s == 0;
        if (!first && !end_of.count(dep)) break;
        const double ready = first ? 0 : end_of[dep] + (op.forward ? 0.25 * unit : 0);
        const double start = std::max(ready, free_at[s]);
        const double dur = (op.forward ? 1 : 2) * unit;
        Event e = compute(s, start, start + dur, op.forward ? cat::forward : cat::backward);
        e.microbatch = op.mb;
        t.events.push_back(e);
        if (op.forward && s + 1 < stages) {
          t.events.push_back(comm(s, start + dur, start + dur + 0.25 * unit, "send", 1 << 20));
        }
        end_of[{s, op.forward, op.mb}] = free_at[s] = start + dur;
        ++next[s];
        progress = true;
      }
    }
  }
  return t;
}

}  // namespace

TEST_CASE("intervals: union and intersection are exact") {
  auto merged = merge_intervals({{3, 4}, {0, 2}, {1, 1.5}, {2, 2.5}, {5, 5}});
  REQUIRE(merged == std::vector<Interval>{{0, 2.5}, {3, 4}});
  REQUIRE(total_length(merged) == 3.5);
  REQUIRE(intersect(merged, {{1, 3.5}}) == std::vector<Interval>{{1, 2.5}, {3, 3.5}});
}

// The planner streams events into an IntervalUnion instead of keeping them: in any order, with
// touching, nested, empty and repeated intervals, its clipped spans are exactly what
// merge_intervals makes of the intervals clipped one by one (lane_intervals' rule).
TEST_CASE("intervals: a union built one interval at a time clips as the merged trace does") {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> point(0, 40);
  for (int trial = 0; trial < 200; ++trial) {
    IntervalUnion stream;
    std::vector<Interval> kept;
    const int n = 1 + trial % 30;
    for (int i = 0; i < n; ++i) {
      const double a = point(random) * 0.25, b = a + point(random) % 9 * 0.25;  // b - a may be 0
      stream.add({a, b});
      kept.push_back({a, b});
    }
    for (Interval window : {Interval{0, 10}, Interval{1.25, 6.5}, Interval{3, 3.25}}) {
      std::vector<Interval> clipped;
      for (const Interval& i : kept)
        clipped.push_back({std::max(i.begin, window.begin), std::min(i.end, window.end)});
      INFO("trial " << trial << " window " << window.begin << ".." << window.end);
      CHECK(stream.clipped(window) == merge_intervals(clipped));
    }
    CHECK(stream.spans() <= kept.size());
  }
}

TEST_CASE("analysis: busy, idle, bubble, overlap over the whole trace") {
  const TraceSummary s = analyze(two_rank_trace());
  REQUIRE(s.window == Interval{0, 8});
  REQUIRE(s.ranks.size() == 2);
  const RankSummary& r0 = s.ranks[0];
  CHECK(r0.span == 8);
  CHECK(r0.busy == 4);  // [0,3] + [5,6]: the overlapping pair counts once
  CHECK(r0.idle == 4);
  CHECK(r0.bubble_fraction == 0.5);
  CHECK(r0.comm == 3);
  CHECK(r0.overlap == 1);  // [2,3]
  CHECK(r0.overlap_fraction == Approx(1.0 / 3));
  CHECK(r0.exposed_comm == 2);
  CHECK(r0.bytes_sent == 100);  // the recv is counted at its sender
  const RankSummary& r1 = s.ranks[1];
  CHECK(r1.busy == 4);
  CHECK(r1.bubble_fraction == 0.5);
  CHECK(r1.comm == 0);
  CHECK(r1.overlap_fraction == 0);
  CHECK(s.mean_bubble_fraction == 0.5);
  CHECK(s.total_bytes_sent == 100);
}

TEST_CASE("analysis: a step's window spans that step on every rank") {
  const Trace t = two_rank_trace();
  REQUIRE(analysis_window(t, 0) == Interval{0, 4});
  const TraceSummary s = analyze(t, 1);
  REQUIRE(s.window == Interval{4, 8});
  CHECK(s.ranks[0].busy == 1);
  CHECK(s.ranks[0].bubble_fraction == 0.75);
  CHECK(s.ranks[0].comm == 1);
  CHECK(s.ranks[0].overlap == 0);
  CHECK(s.ranks[0].bytes_sent == 0);
  CHECK(s.ranks[1].bubble_fraction == 0);
  CHECK(s.max_bubble_fraction == 0.75);
  REQUIRE_THROWS_AS(analyze(t, 7), std::invalid_argument);
}

TEST_CASE("analysis: an empty trace gives zeros") {
  Trace t;
  t.num_ranks = 1;
  const TraceSummary s = analyze(t);
  REQUIRE(s.ranks.size() == 1);
  CHECK(s.ranks[0].bubble_fraction == 0);
}

TEST_CASE("memory timeline: sorted samples and per-category peaks") {
  Trace t;
  t.num_ranks = 2;
  t.counters = {{0, 1.0, {10, 0, 0, 0, 0, 0}},
                {0, 3.0, {5, 20, 0, 0, 0, 0}},
                {1, 2.0, {999, 0, 0, 0, 0, 0}},
                {0, 0.5, {1, 0, 0, 0, 0, 7}}};
  const MemoryTimeline m = memory_timeline(t, 0);
  REQUIRE(m.samples.size() == 3);
  CHECK(m.samples[0].time == 0.5);
  CHECK(m.samples[2].time == 3.0);
  CHECK(m.peak.by_category == std::array<int64_t, 6>{10, 20, 0, 0, 0, 7});
  CHECK(m.peak.total == 25);
}

TEST_CASE("bandwidth: nccl-tests bus bandwidth factors") {
  CHECK(bus_bandwidth_factor("all_reduce", 4) == 1.5);
  CHECK(bus_bandwidth_factor("reduce_scatter", 8) == 7.0 / 8);
  CHECK(bus_bandwidth_factor("all_gather", 2) == 0.5);
  CHECK(bus_bandwidth_factor("broadcast", 8) == 1);
  CHECK(bus_bandwidth_factor("all_reduce", 1) == 0);
  const Bandwidth bw = collective_bandwidth(1'000'000'000, 0.5, "all_reduce", 4);
  CHECK(bw.algbw == 2e9);
  CHECK(bw.busbw == 3e9);
  CHECK(collective_bandwidth(100, 0, "all_reduce", 4).algbw == 0);
  CHECK_THROWS_AS(bus_bandwidth_factor("all_reduse", 4), std::invalid_argument);
}

TEST_CASE("ascii timeline: 4-rank 1F1B pipeline with 8 micro-batches") {
  const Trace t = one_f_one_b(4, 8, 1e-3);
  AsciiTimelineOptions opt;
  opt.width = 100;
  opt.colour = false;
  const std::string text = render_ascii_timeline(t, opt);
  std::cout << text << '\n';
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 4 * 2 + 2);  // ruler, compute+comm per rank, legend
  for (size_t i = 0; i < 10; ++i) CHECK(code_points(lines[i]) <= 100);
  CHECK(code_points(lines[2]) == 100);
  CHECK(lines[0].find("time (ms)") == 0);
  CHECK(lines[2].find("GPU 0 compute|F0") == 0);
  for (int mb = 0; mb < 8; ++mb) {
    CHECK(lines[2].find("F" + std::to_string(mb)) != std::string::npos);
    CHECK(lines[2].find("B" + std::to_string(mb)) != std::string::npos);
  }
  CHECK(lines[8].find("GPU 3 compute|...") == 0);  // the last stage waits for its first input
  CHECK(lines[3].find('=') != std::string::npos);
  CHECK(lines[10].find("F forward") != std::string::npos);

  opt.unicode = true;
  opt.colour = true;
  const std::string fancy = render_ascii_timeline(t, opt);
  std::cout << fancy << '\n';
  CHECK(fancy.find("·") != std::string::npos);
  CHECK(fancy.find("\x1b[") != std::string::npos);
}

TEST_CASE("ascii timeline: DDP step with comm overlapping backward") {
  Trace t;
  t.num_ranks = 2;
  for (int r = 0; r < 2; ++r) {
    t.events.push_back(compute(r, 0, 3));  // forward
    for (int layer = 3; layer >= 0; --layer) {
      const double start = 3 + (3 - layer) * 1.5;
      Event b = compute(r, start, start + 1.5, cat::backward);
      b.layer = layer;
      t.events.push_back(b);
      t.events.push_back(comm(r, start + 1.5, start + 2.5 + 0.2 * r, "all_reduce", 1 << 24));
    }
    t.events.push_back(compute(r, 10, 10.5, cat::optimizer));
  }
  AsciiTimelineOptions opt;
  opt.width = 80;
  opt.colour = false;
  const std::string text = render_ascii_timeline(t, opt);
  std::cout << text << '\n';
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 2 * 2 + 2);
  CHECK(code_points(lines[2]) == 80);
  CHECK(lines[2].find('O') != std::string::npos);
  CHECK(lines[3].find("====") != std::string::npos);
  CHECK(lines[0].find("time (s)") == 0);
}

TEST_CASE("ascii timeline: single rank, tiny events still show") {
  Trace t;
  t.num_ranks = 1;
  Event f = compute(0, 0, 40e-6);
  f.microbatch = 0;
  t.events = {f, compute(0, 40e-6, 41e-6, cat::compute),  // 1/100 of the run: still one cell
              compute(0, 41e-6, 100e-6, cat::backward)};
  AsciiTimelineOptions opt;
  opt.width = 60;
  opt.colour = false;
  opt.unicode = true;
  const std::string text = render_ascii_timeline(t, opt);
  std::cout << text << '\n';
  const auto lines = lines_of(text);
  REQUIRE(lines.size() == 2 + 1 + 2);  // no comm anywhere: no comm row
  CHECK(code_points(lines[2]) == 60);
  CHECK(lines[2].find('C') != std::string::npos);
  CHECK(lines[0].find("time (us)") == 0);
  CHECK(render_ascii_timeline(Trace{}) == "(empty trace)\n");
}

}  // namespace test_trace_analysis

// The dashboard's view model, without a window: time <-> pixel mapping, culling and merging,
// idle gaps, selection partners, memory stacking and the per-rank summary.
#include <catch2/catch.hpp>

#include "core/trace/analysis.h"
#include "viz/synthetic.h"
#include "viz/view_model.h"

namespace test_view_model {

using namespace mgpu;
using namespace mgpu::viz;
using trace::Lane;

namespace {
trace::Event make_event(int rank, Lane lane, double start, double dur,
                        std::string cat = "forward") {
  trace::Event e;
  e.rank = rank;
  e.lane = lane;
  e.start = start;
  e.dur = dur;
  e.cat = std::move(cat);
  e.name = e.cat;
  return e;
}
}  // namespace

TEST_CASE("time axis maps seconds to pixels and back, zooms around the cursor, pans", "[viz]") {
  TimeAxis axis;
  axis.x0 = 100;
  axis.width = 1000;
  axis.fit(0, 10, 0);
  CHECK(axis.to_px(0) == Approx(100));
  CHECK(axis.to_px(5) == Approx(600));
  CHECK(axis.to_px(10) == Approx(1100));
  CHECK(axis.to_time(350) == Approx(2.5));

  axis.zoom(2, 350);  // zoom in around t = 2.5: it stays under the cursor, the span halves
  CHECK(axis.to_time(350) == Approx(2.5));
  CHECK(axis.t1 - axis.t0 == Approx(5));

  axis.pan(100);  // drag right by 100 px: earlier times come into view
  CHECK(axis.to_time(450) == Approx(2.5));

  axis.fit(2, 4, 0.01);
  CHECK(axis.t0 == Approx(2 - 0.02));
  CHECK(axis.t1 == Approx(4 + 0.02));
}

TEST_CASE("ruler ticks use a 1/2/5 step and a unit that fits it", "[viz]") {
  TimeAxis axis;
  axis.width = 1000;
  axis.fit(0, 0.033, 0);  // 33 ms over 1000 px, ticks at least 90 px apart -> 5 ms
  const Ticks ticks = ruler_ticks(axis, 90);
  CHECK(ticks.step == Approx(5e-3));
  REQUIRE(ticks.times.size() == 7);
  CHECK(format_time(ticks.times[0], ticks.step) == "0");
  CHECK(format_time(ticks.times[1], ticks.step) == "5 ms");
  CHECK(format_time(2.5e-6, 5e-7) == "2.5 us");
  CHECK(format_time(3e-9, 1e-9) == "3 ns");
  CHECK(format_time(2, 1) == "2 s");
  CHECK(format_duration(3.2e-3) == "3.20 ms");
  CHECK(format_bytes(1.5 * 1024 * 1024 * 1024) == "1.50 GiB");
}

TEST_CASE("off-screen events are culled and sub-pixel events merged into dense blocks", "[viz]") {
  trace::Trace t;
  t.num_ranks = 1;
  // 10 000 events of 1 us back to back (10 ms), then one 10 ms event.
  for (int i = 0; i < 10000; ++i) t.events.push_back(make_event(0, Lane::compute, i * 1e-6, 1e-6));
  t.events.push_back(make_event(0, Lane::compute, 0.010, 0.010, "backward"));
  TraceView view(t);

  TimeAxis axis;
  axis.width = 1000;
  axis.fit(0, 0.020, 0);  // 20 us per pixel: the small events are far below a pixel
  auto blocks = view.visible_blocks(0, Lane::compute, axis);
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].dense());
  CHECK(blocks[0].count == 10000);
  CHECK(blocks[0].end == Approx(0.010));
  CHECK_FALSE(blocks[1].dense());
  CHECK(view.event(blocks[1].event).cat == "backward");

  // Zoomed in on 100 us in the middle: 100 events of 10 px each, the rest culled.
  axis.fit(0.005, 0.005 + 100e-6, 0);
  blocks = view.visible_blocks(0, Lane::compute, axis);
  CHECK(blocks.size() >= 100);
  CHECK(blocks.size() <= 102);  // the events touching both edges
  for (const Block& b : blocks) CHECK_FALSE(b.dense());

  // Only the big event on screen.
  axis.fit(0.012, 0.013, 0);
  blocks = view.visible_blocks(0, Lane::compute, axis);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].event == 10000);

  // Nothing on screen.
  axis.fit(1, 2, 0);
  CHECK(view.visible_blocks(0, Lane::compute, axis).empty());
  CHECK(view.visible_blocks(0, Lane::comm, axis).empty());
}

TEST_CASE("a gap wider than a pixel splits dense blocks", "[viz]") {
  trace::Trace t;
  for (int i = 0; i < 10; ++i) t.events.push_back(make_event(0, Lane::compute, i * 1e-6, 1e-6));
  for (int i = 0; i < 10; ++i)
    t.events.push_back(make_event(0, Lane::compute, 1e-3 + i * 1e-6, 1e-6));
  TraceView view(t);
  TimeAxis axis;
  axis.width = 100;
  axis.fit(0, 1.1e-3, 0);  // 11 us per pixel; the 1 ms hole is ~90 px
  const auto blocks = view.visible_blocks(0, Lane::compute, axis);
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].count == 10);
  CHECK(blocks[1].count == 10);
}

TEST_CASE("idle gaps of a 1F1B pipeline are its bubbles", "[viz]") {
  viz::testing::PipelineSpec spec;
  spec.stages = 4;
  spec.microbatches = 8;
  spec.comm_events = false;  // no transfer time: the textbook schedule
  TraceView view(viz::testing::synthetic_pipeline(spec));
  REQUIRE(view.num_ranks() == 4);
  // (M + P - 1) * (F + B) = 11 * 3 ms.
  CHECK(view.run_start() == Approx(0));
  CHECK(view.run_end() == Approx(33e-3));
  for (int r = 0; r < 4; ++r) {
    double idle = 0;
    for (const Gap& g : view.idle_gaps(r)) idle += g.dur();
    CHECK(idle == Approx(9e-3));  // (P - 1) * (F + B)
    CHECK(view.summary(r).bubble == Approx(3.0 / 11));
    CHECK(view.summary(r).busy == Approx(24e-3));
  }
  // Rank 3 (last stage) waits 3 forwards before its first forward: its first gap is [0, 3 ms].
  REQUIRE_FALSE(view.idle_gaps(3).empty());
  CHECK(view.idle_gaps(3)[0].start == Approx(0));
  CHECK(view.idle_gaps(3)[0].end == Approx(3e-3));
  CHECK(*view.prediction("bubble_fraction") == Approx(3.0 / 11));
  CHECK_FALSE(view.prediction("nothing"));
}

TEST_CASE("selecting a send highlights its recv, and a collective all its members", "[viz]") {
  trace::Trace t;
  t.num_ranks = 4;
  auto p2p = [&](int rank, int peer, const char* op, double start) {
    trace::Event e = make_event(rank, Lane::comm, start, 1e-4, "comm");
    e.op = op;
    e.peer = peer;
    e.group = "pp";
    t.events.push_back(e);
    return static_cast<int>(t.events.size() - 1);
  };
  const int send_a = p2p(0, 1, "send", 0.0);
  const int send_b = p2p(0, 1, "send", 1.0);
  const int recv_b = p2p(1, 0, "recv", 1.0);  // recorded out of order on purpose
  const int recv_a = p2p(1, 0, "recv", 0.0);
  const int other_send = p2p(1, 0, "send", 2.0);  // the reverse direction: a different pair
  const int other_recv = p2p(0, 1, "recv", 2.0);
  std::vector<int> collective, other_collective;
  for (int r = 0; r < 4; ++r) {
    trace::Event e = make_event(r, Lane::comm, 3.0, 0.5, "comm");
    e.op = "all_reduce";
    e.group = "world";
    e.seq = 7;
    t.events.push_back(e);
    collective.push_back(static_cast<int>(t.events.size() - 1));
    e.seq = 8;
    t.events.push_back(e);
    other_collective.push_back(static_cast<int>(t.events.size() - 1));
  }
  TraceView view(t);
  CHECK(view.partners(send_a) == std::vector<int>{recv_a});
  CHECK(view.partners(recv_a) == std::vector<int>{send_a});
  CHECK(view.partners(send_b) == std::vector<int>{recv_b});
  CHECK(view.partners(other_send) == std::vector<int>{other_recv});
  auto members = view.partners(collective[2]);
  CHECK(members == std::vector<int>{collective[0], collective[1], collective[3]});
  CHECK(view.partners(other_collective[0]).size() == 3);

  trace::Event lone = make_event(0, Lane::compute, 0, 1);
  t.events.push_back(lone);
  TraceView view2(t);
  CHECK(view2.partners(static_cast<int>(t.events.size() - 1)).empty());
}

TEST_CASE("event_at finds the event under the cursor", "[viz]") {
  trace::Trace t;
  t.events.push_back(make_event(0, Lane::compute, 0, 1));
  t.events.push_back(make_event(0, Lane::compute, 2, 1));
  TraceView view(t);
  CHECK(view.event_at(0, Lane::compute, 0.5, 0) == 0);
  CHECK(view.event_at(0, Lane::compute, 2.5, 0) == 1);
  CHECK(view.event_at(0, Lane::compute, 1.5, 0) == -1);
  CHECK(view.event_at(0, Lane::compute, 1.05, 0.1) == 0);
  CHECK(view.event_at(0, Lane::comm, 0.5, 0) == -1);
}

TEST_CASE("memory stacks by category: cumulative sums end at the total", "[viz]") {
  viz::testing::PipelineSpec spec;
  const trace::Trace t = viz::testing::synthetic_pipeline(spec);
  TraceView view(t);
  size_t checked = 0;
  for (const auto& c : t.counters) {
    int64_t total = 0;
    for (int64_t b : c.bytes) total += b;
    const auto& samples = view.memory(c.rank);
    const auto it = std::find_if(samples.begin(), samples.end(), [&](const StackedSample& s) {
      return s.time == c.time && s.total() == total;
    });
    CHECK(it != samples.end());
    if (it != samples.end()) {
      int64_t running = 0;
      for (int k = 0; k < 6; ++k) CHECK(it->cumulative[k] == (running += c.bytes[k]));
    }
    ++checked;
  }
  CHECK(checked == t.counters.size());
  // 1F1B: stage 0 holds P = 4 activations at its peak: 200 + 200 + 400 + 4 * 40 MiB.
  CHECK(view.summary(0).peak_bytes == (800 + 4 * 40) * (int64_t(1) << 20));
  CHECK(view.summary(3).peak_bytes == (800 + 1 * 40) * (int64_t(1) << 20));
  CHECK(view.memory_capacity().value() == Approx(1024.0 * 1024 * 1024));

  // Zoomed out to a few pixels, the tallest sample of each pixel stands for it.
  TimeAxis axis;
  axis.width = 4;
  axis.fit(view.run_start(), view.run_end(), 0);
  const auto spans = view.visible_memory(0, axis);
  CHECK(spans.size() <= 5);
  int64_t tallest = 0;
  for (const MemorySpan& s : spans) tallest = std::max(tallest, view.memory(0)[s.sample].total());
  CHECK(tallest == view.summary(0).peak_bytes);
}

TEST_CASE("lane layout stacks one group per rank", "[viz]") {
  LaneLayout layout;
  layout.top = 100;
  layout.lane_height = 20;
  layout.lane_gap = 2;
  layout.group_gap = 10;
  CHECK(layout.group_height() == 42);
  CHECK(layout.lane_top(0, Lane::compute) == 100);
  CHECK(layout.lane_top(0, Lane::comm) == 122);
  CHECK(layout.lane_top(2, Lane::compute) == 100 + 2 * 52);
  CHECK(layout.total_height(3) == 3 * 42 + 2 * 10);
  CHECK(layout.hit(105, 3)->first == 0);
  CHECK(layout.hit(125, 3)->second == Lane::comm);
  CHECK_FALSE(layout.hit(145, 3));  // in the gap between ranks
  CHECK_FALSE(layout.hit(1000, 3));
}

TEST_CASE("an empty trace gives an empty, valid view", "[viz]") {
  TraceView view(trace::Trace{});
  CHECK(view.num_ranks() == 0);
  TimeAxis axis;
  axis.fit(view.run_start(), view.run_end());
  CHECK(axis.t1 > axis.t0);
  CHECK(view.visible_blocks(0, Lane::compute, axis).empty());
}

TEST_CASE("a multi-step trace is summarised by its last step, like the lesson's table", "[viz]") {
  // Two steps on one rank: step 0 is all work, step 1 is half idle.
  trace::Trace t;
  t.num_ranks = 1;
  auto add = [&](const char* cat, trace::Lane lane, double start, double dur, int step) {
    trace::Event e;
    e.name = cat;
    e.cat = cat;
    e.lane = lane;
    e.start = start;
    e.dur = dur;
    e.step = step;
    t.events.push_back(e);
  };
  add(trace::cat::step, trace::Lane::step, 0, 1, 0);
  add(trace::cat::forward, trace::Lane::compute, 0, 1, -1);
  add(trace::cat::step, trace::Lane::step, 1, 1, 1);
  add(trace::cat::forward, trace::Lane::compute, 1, 0.5, -1);
  mgpu::viz::TraceView view(t);
  REQUIRE(view.summary_step() == 1);
  CHECK(view.summary(0).bubble == Approx(0.5));
  CHECK(view.summary(0).bubble == Approx(trace::analyze(t, 1).ranks[0].bubble_fraction));
}

TEST_CASE("the ruler reads 0 at the axis origin (the shown step's start)", "[viz]") {
  TimeAxis axis;
  axis.width = 1000;
  axis.origin = 1.00037;  // a step that starts off the tick grid
  axis.fit(axis.origin, axis.origin + 0.033, 0.01);
  const Ticks ticks = ruler_ticks(axis, 90);
  CHECK(ticks.step == Approx(5e-3));
  // One tick sits on the origin and reads "0" (the margin before it is narrower than a step),
  // the next reads "5 ms".
  REQUIRE(ticks.times.size() >= 2);
  CHECK(ticks.times[0] == Approx(axis.origin));
  CHECK(format_time(ticks.times[0] - axis.origin, ticks.step) == "0");
  CHECK(format_time(ticks.times[1] - axis.origin, ticks.step) == "5 ms");
  for (double t : ticks.times) {
    CHECK(t >= axis.t0);
    CHECK(t <= axis.t1);
  }
}

TEST_CASE("a rank's memory runs to the end of the window, past its last counter sample", "[viz]") {
  trace::Trace t;
  t.num_ranks = 2;
  t.events.push_back(make_event(0, Lane::compute, 0.0, 1.0));
  t.events.push_back(make_event(1, Lane::compute, 0.0, 2.0));
  trace::CounterSample c;
  c.rank = 0;
  c.time = 0.25;  // rank 0's only (and last) sample, long before the window ends
  c.bytes[0] = 100;
  t.counters.push_back(c);
  // ... and the empty sample a lesson writes when the rank exits (its thread frees the model).
  c.time = 1.0;
  c.bytes[0] = 0;
  t.counters.push_back(c);
  TraceView view(std::move(t));
  REQUIRE(view.run_end() == Approx(2.0));
  REQUIRE(view.memory(0).size() == 2);

  TimeAxis axis;
  axis.width = 1000;
  axis.fit(view.run_start(), view.run_end(), 0.05);  // the window shows past the run's end
  const auto spans = view.visible_memory(0, axis);
  REQUIRE(spans.size() == 1);
  CHECK(spans.back().start == Approx(0.25));
  CHECK(view.memory(0)[spans.back().sample].total() == 100);
  CHECK(spans.back().end == Approx(axis.t1));
  CHECK(axis.to_px(spans.back().end) == Approx(axis.x0 + axis.width));
}

TEST_CASE("header words: units, thousands separators, measured vs theory, the run named", "[viz]") {
  CHECK(format_count(0) == "0");
  CHECK(format_count(999) == "999");
  CHECK(format_count(1234567) == "1,234,567");
  CHECK(format_count(-12345) == "-12,345");

  trace::Trace t = viz::testing::synthetic_pipeline(viz::testing::PipelineSpec{});
  t.metadata["lesson"] = "pipeline";
  t.metadata["clock"] = "modeled";
  t.metadata["profile"] = {{"name", "theory"}, {"memory_capacity_GiB", 0.0}};
  t.metadata["config"] = {{"schedule", "1f1b"}, {"microbatches", 8}, {"pp", 4}};
  t.metadata["predictions"] = {{"bubble_fraction", 0.273},
                               {"bytes_per_rank", 662000.0},
                               {"speedup", 2.733},
                               {"all_reduces_per_step", 12000}};
  const TraceView v(t);
  const std::string run = describe_run(v);
  CHECK(run.find("lesson pipeline") != std::string::npos);
  CHECK(run.find("schedule 1f1b") != std::string::npos);
  CHECK(run.find("4 GPUs (mesh pp 4)") != std::string::npos);
  CHECK(run.find("8 micro-batches") != std::string::npos);
  CHECK(run.find("modeled clock") != std::string::npos);

  const std::string p = describe_predictions(v);
  CHECK(p.find("measured, mean over ranks (theory 27.3%)") != std::string::npos);
  CHECK(p.find("bytes per rank 646 KiB (theory)") != std::string::npos);  // not 6.62e+05
  CHECK(p.find("speedup 2.73x (measured)") != std::string::npos);         // it is measured
  CHECK(p.find("all reduces per step 12,000 (theory)") != std::string::npos);
  CHECK(p.find("e+") == std::string::npos);
  // The "theory" profile has no device memory: no capacity, so no "peak 6 MiB / 0 B".
  CHECK_FALSE(v.memory_capacity().has_value());
}

TEST_CASE("idle time is called a bubble only in a pipeline run", "[viz]") {
  auto view_of = [](nlohmann::json config) {
    trace::Trace t;
    t.num_ranks = 4;
    t.metadata["config"] = std::move(config);
    return TraceView(std::move(t));
  };
  CHECK(view_of({{"schedule", "1f1b"}}).is_pipeline());             // the pipeline lesson
  CHECK(view_of({{"schedule", "1f1b"}, {"pp", 2}}).is_pipeline());  // hybrid with stages
  CHECK_FALSE(view_of({{"schedule", "1f1b"}, {"pp", 1}}).is_pipeline());
  CHECK_FALSE(view_of({{"cp", 4}}).is_pipeline());  // ring attention idles, without a bubble
  CHECK_FALSE(TraceView(trace::Trace{}).is_pipeline());
}

namespace {

// Two steps of a two-stage pipeline, the second after a barrier: rank 1 idles from its last work
// in step 0 (t = 3) to its first in step 1 (t = 5.5), across step 0's end (4) and step 1's
// start (4.5). Step 1 runs over [4.5, 8.5]; rank 1 works [5.5, 7.5] in it, so idles 2 s.
trace::Trace two_pipeline_steps(bool pipeline) {
  trace::Trace t;
  t.num_ranks = 2;
  if (pipeline) t.metadata = {{"config", {{"schedule", "1f1b"}, {"stages", 2}}}};
  auto add = [&](int rank, const char* cat, Lane lane, double start, double dur, int step) {
    trace::Event e;
    e.name = cat;
    e.cat = cat;
    e.rank = rank;
    e.lane = lane;
    e.start = start;
    e.dur = dur;
    e.step = step;
    t.events.push_back(e);
  };
  for (int step = 0; step < 2; ++step) {
    const double s = 4.5 * step;
    for (int rank = 0; rank < 2; ++rank) add(rank, trace::cat::step, Lane::step, s, 4, step);
    add(0, trace::cat::forward, Lane::compute, s, 1, -1);
    add(1, trace::cat::forward, Lane::compute, s + 1, 1, -1);
    add(1, trace::cat::backward, Lane::compute, s + 2, 1, -1);
    add(0, trace::cat::backward, Lane::compute, s + 3, 1, -1);
  }
  return t;
}

}  // namespace

TEST_CASE("a pipeline trace's shown step has its own bubbles, start to end (#29)", "[viz]") {
  const TraceView view(two_pipeline_steps(true));
  REQUIRE(view.is_pipeline());
  REQUIRE(view.summary_step() == 1);
  const trace::Interval window = trace::analysis_window(view.trace(), 1);
  CHECK(view.shown_start() == window.begin);
  for (int r = 0; r < view.num_ranks(); ++r) {
    INFO("rank " << r);
    double idle_in_step = 0;
    for (const Gap& g : view.idle_gaps(r)) {
      if (g.end <= window.begin || g.start >= window.end) continue;  // another step's
      // A gap the shown step shows lies wholly inside it: its label is this step's idle time.
      CHECK(g.start >= window.begin);
      CHECK(g.end <= window.end);
      idle_in_step += g.dur();
    }
    CHECK(idle_in_step == Approx(view.summary(r).idle));
  }
  // Rank 1's idle between its steps is cut at step 0's end and step 1's start.
  std::vector<std::pair<double, double>> rank1;
  for (const Gap& g : view.idle_gaps(1)) rank1.emplace_back(g.start, g.end);
  CHECK(rank1 ==
        std::vector<std::pair<double, double>>{{0, 1}, {3, 4}, {4, 4.5}, {4.5, 5.5}, {7.5, 8.5}});
}

TEST_CASE("a trace that is not a pipeline keeps its idle gaps whole", "[viz]") {
  const TraceView view(two_pipeline_steps(false));
  REQUIRE_FALSE(view.is_pipeline());
  std::vector<std::pair<double, double>> rank1;
  for (const Gap& g : view.idle_gaps(1)) rank1.emplace_back(g.start, g.end);
  CHECK(rank1 == std::vector<std::pair<double, double>>{{0, 1}, {3, 5.5}, {7.5, 8.5}});
}

TEST_CASE("a capacity no device has is not shown (never 'of inf TiB')", "[viz][hostile]") {
  trace::Trace t = viz::testing::synthetic_pipeline(viz::testing::PipelineSpec{});
  t.metadata["profile"] = {{"name", "forged"}, {"memory_capacity_GiB", 1e308}};
  CHECK_FALSE(TraceView(t).memory_capacity().has_value());
  t.metadata["profile"] = {{"name", "h100"}, {"memory_capacity_GiB", 80.0}};
  CHECK(TraceView(t).memory_capacity() == 80.0 * (1 << 30));
}

}  // namespace test_view_model

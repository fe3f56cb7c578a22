// The dashboard rendered headless (run under xvfb-run -a): a synthetic 4-rank 1F1B trace with
// known times, checked pixel by pixel at coordinates computed from the view model's mapping.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/trace/chrome_trace.h"
#include "viz/dashboard.h"
#include "viz/panels.h"
#include "viz/png_image.h"
#include "viz/synthetic.h"

namespace test_dashboard {

using namespace mgpu;
using namespace mgpu::viz;
using trace::Lane;

namespace {

std::filesystem::path out_dir() {
  auto dir = std::filesystem::path(MGPU_BINARY_DIR) / "test_viz_out";
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

using viz::testing::Image;

DashboardOptions one_f_one_b_options() {
  viz::testing::PipelineSpec spec;  // 4 stages, 8 micro-batches, F = 1 ms, B = 2 ms
  DashboardOptions options;
  options.traces.push_back(viz::testing::synthetic_pipeline(spec));
  options.title = "mgpu-lab - 1F1B, 4 GPUs, 8 micro-batches";
  return options;
}

// A point inside an event's cell away from its centred label.
std::pair<double, double> inside(const Dashboard& d, const trace::Event& e) {
  const LaneLayout& l = d.layout(0);
  return {d.axis().to_px(e.start + 0.2 * e.dur), l.lane_top(e.rank, e.lane) + 4};
}

}  // namespace

TEST_CASE("screenshot of a 4-rank 1F1B trace: size, lane groups, colours, determinism", "[viz]") {
  Dashboard dashboard(one_f_one_b_options());
  const auto png = out_dir() / "1f1b.png";
  REQUIRE(render_screenshot(dashboard, png.string(), 1280, 720) == 0);
  const Image img(png);
  REQUIRE(img.w == 1280);
  REQUIRE(img.h == 720);

  const Palette& pal = palette(false);
  const TraceView& view = dashboard.views()[0];
  const LaneLayout& layout = dashboard.layout(0);
  const TimeAxis& axis = dashboard.axis();
  INFO("axis x0 " << axis.x0 << " width " << axis.width << " layout top " << layout.top);
  REQUIRE(axis.width > 800);  // the timeline uses most of the width

  // Every forward and backward cell has its colour.
  int forwards = 0, backwards = 0;
  for (const trace::Event& e : view.trace().events) {
    if (e.lane != Lane::compute) continue;
    auto [x, y] = inside(dashboard, e);
    INFO(e.name << " on GPU " << e.rank << " at " << x << "," << y);
    if (e.cat == trace::cat::forward) {
      CHECK(img.at(x, y) == pal.forward);
      ++forwards;
    } else {
      CHECK(img.at(x, y) == pal.backward);
      ++backwards;
    }
  }
  CHECK(forwards == 32);
  CHECK(backwards == 32);

  // Bubbles are shaded: the last stage waits for three forwards (and transfers) before starting.
  for (int r = 0; r < 4; ++r) {
    REQUIRE_FALSE(view.idle_gaps(r).empty());
    for (const Gap& g : view.idle_gaps(r)) {
      if (axis.to_px(g.end) - axis.to_px(g.start) < 6) continue;
      // Hatched: idle, hatch, or their anti-aliased mix; reddish, and no event colour.
      const ImU32 c = img.at(axis.to_px(g.start) + 3, layout.lane_top(r, Lane::compute) + 2);
      const int red = c & 0xff, green = (c >> 8) & 0xff, blue = (c >> 16) & 0xff;
      CHECK(red > green);
      CHECK(red > blue);
      CHECK(c != pal.lane_background);
    }
  }
  CHECK(axis.to_px(view.idle_gaps(3)[0].end) - axis.to_px(view.idle_gaps(3)[0].start) > 50);

  // One lane group per rank: lanes for GPU 0..3, window background in the gaps, nothing for a 5th.
  const double x_mid_gap = axis.x0 + 5;  // left edge of the lanes, before any event
  for (int r = 0; r < 4; ++r) {
    for (Lane l : {Lane::compute, Lane::comm}) {
      const ImU32 c = img.at(x_mid_gap, layout.lane_top(r, l) + layout.lane_height / 2);
      CHECK((c == pal.lane_background || c == pal.idle || c == pal.idle_hatch || c == pal.forward));
    }
    if (r < 3) {
      const double y_between = layout.group_top(r) + layout.group_height() + layout.group_gap / 2;
      CHECK(img.at(x_mid_gap, y_between) != pal.lane_background);
    }
  }
  CHECK(img.at(x_mid_gap, layout.lane_top(4, Lane::compute) + layout.lane_height / 2) !=
        pal.lane_background);

  // Send/recv transfers on the comm lanes.
  int comm_checked = 0;
  for (const trace::Event& e : view.trace().events) {
    if (e.lane != Lane::comm || axis.to_px(e.end()) - axis.to_px(e.start) < 3) continue;
    auto [x, y] = inside(dashboard, e);
    x = axis.to_px(e.start) + 1;
    CHECK(img.at(x, y) == pal.comm);
    ++comm_checked;
  }
  CHECK(comm_checked > 0);

  // Same trace, same bytes.
  const auto png2 = out_dir() / "1f1b-again.png";
  REQUIRE(render_screenshot(one_f_one_b_options(), png2.string(), 1280, 720) == 0);
  CHECK(read_bytes(png) == read_bytes(png2));
}

TEST_CASE("presentation mode and compare mode render", "[viz]") {
  DashboardOptions options = one_f_one_b_options();
  options.presentation = true;
  const auto png = out_dir() / "presentation.png";
  REQUIRE(render_screenshot(options, png.string(), 1600, 900) == 0);
  CHECK(Image(png).w == 1600);

  viz::testing::PipelineSpec gpipe;
  gpipe.schedule = viz::testing::Schedule::gpipe;
  DashboardOptions compare = one_f_one_b_options();
  compare.traces.insert(compare.traces.begin(), viz::testing::synthetic_pipeline(gpipe));
  compare.labels = {"GPipe", "1F1B"};
  compare.layout = CompareLayout::rows;
  Dashboard d(compare);
  const auto png2 = out_dir() / "compare.png";
  REQUIRE(render_screenshot(d, png2.string(), 1600, 1000) == 0);
  // The second view is drawn below the first on the same time axis.
  CHECK(d.layout(1).top > d.layout(0).top + d.layout(0).total_height(4));
}

TEST_CASE("compare mode lines both traces up at their step start on one ruler", "[viz]") {
  // The same 1F1B run twice, the second starting 40 ms later (as a later or longer-warmup run
  // does): on absolute time the second would sit off to the right, cut off by the shared width.
  DashboardOptions compare = one_f_one_b_options();
  trace::Trace later = compare.traces[0];
  const double delay = 40e-3;
  for (trace::Event& e : later.events) e.start += delay;
  for (trace::CounterSample& c : later.counters) c.time += delay;
  compare.traces.push_back(later);
  compare.labels = {"early", "late"};
  compare.layout = CompareLayout::rows;
  Dashboard d(compare);
  const auto png = out_dir() / "compare-aligned.png";
  REQUIRE(render_screenshot(d, png.string(), 1600, 1000) == 0);
  const Image img(png);
  const Palette& pal = palette(false);

  // Every compute cell of the late run is drawn where the early run's same cell is, in its rows.
  const TimeAxis& axis = d.axis();
  int checked = 0;
  for (const trace::Event& e : d.views()[0].trace().events) {
    if (e.lane != Lane::compute) continue;
    for (int v = 0; v < 2; ++v) {
      const double x = axis.to_px(e.start + 0.2 * e.dur);
      const double y = d.layout(v).lane_top(e.rank, e.lane) + 4;
      INFO(e.name << " on GPU " << e.rank << " in view " << v << " at " << x << "," << y);
      CHECK(img.at(x, y) == (e.cat == trace::cat::forward ? pal.forward : pal.backward));
      ++checked;
    }
  }
  CHECK(checked == 128);
  // Each view's own axis reads 0 at its own start, the same pixel for both.
  CHECK(d.axis(1).origin - d.axis(0).origin == Approx(delay));
  CHECK(d.axis(1).to_px(d.axis(1).origin) == Approx(d.axis(0).to_px(d.axis(0).origin)));
}

TEST_CASE("selection highlights partners; classroom controls re-run in-process", "[viz]") {
  DashboardOptions options = one_f_one_b_options();
  options.rerun = RerunHook{[](const nlohmann::json& params) {
                              viz::testing::PipelineSpec spec;
                              spec.microbatches = params.at("microbatches").get<int>();
                              spec.schedule = params.at("schedule") == "gpipe"
                                                  ? viz::testing::Schedule::gpipe
                                                  : viz::testing::Schedule::one_f_one_b;
                              if (spec.microbatches > 64)
                                throw std::invalid_argument("too many micro-batches");
                              return viz::testing::synthetic_pipeline(spec);
                            },
                            nlohmann::json::parse(R"([
        {"name": "microbatches", "type": "int", "min": 1, "max": 32, "value": 8},
        {"name": "schedule", "type": "choice", "choices": ["gpipe", "1f1b"], "value": "1f1b"}])")};
  Dashboard d(options);
  const TraceView& before = d.views()[0];
  int send = -1;
  for (int i = 0; i < static_cast<int>(before.trace().events.size()); ++i) {
    if (before.event(i).op == "send") send = i;
  }
  REQUIRE(send >= 0);
  d.select(0, send);
  REQUIRE(d.selected_partners().size() == 1);
  CHECK(before.event(d.selected_partners()[0]).op == "recv");
  CHECK(before.event(d.selected_partners()[0]).rank == before.event(send).peer);
  const double bubble8 = before.summary(0).bubble;

  REQUIRE(d.set_parameter("microbatches", 32));
  CHECK(d.selected_event() == -1);  // a new trace clears the selection
  CHECK(d.views()[0].lane_events(0, Lane::compute).size() == 64);
  CHECK(d.views()[0].summary(0).bubble < bubble8);  // more micro-batches, smaller bubbles
  REQUIRE(d.set_parameter("schedule", "gpipe"));
  CHECK_FALSE(d.set_parameter("nonexistent", 1));
  CHECK_FALSE(d.set_parameter("microbatches", 100));  // the hook throws: shown, not fatal
  CHECK(d.rerun_error().find("too many") != std::string::npos);
  CHECK(d.options().rerun->params[0]["value"] == 32);  // the control goes back to what is shown
  const auto png = out_dir() / "rerun.png";
  CHECK(render_screenshot(d, png.string(), 1280, 720) == 0);
}

TEST_CASE("malformed trace files give an error line, not a crash", "[viz]") {
  const auto dir = out_dir() / "bad";
  std::filesystem::create_directories(dir);
  // A valid file to cut short.
  const auto good = dir / "good.json";
  trace::write_chrome_trace(viz::testing::synthetic_pipeline({}), good);
  const std::string text = read_bytes(good);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty.json", ""},
      {"brace.json", "{"},
      {"garbage.json", "\x89PNG\r\n\x1a\n garbage \xff\xfe"},
      {"half.json", text.substr(0, text.size() / 2)},
      {"almost.json", text.substr(0, text.size() - 3)},
      {"array-of-numbers.json", "[1, 2, 3]"},
      {"wrong-type.json", R"({"traceEvents": 5})"},
      {"bad-event.json", R"({"traceEvents": [{"ph": "X", "pid": "zero", "ts": "soon"}]})"},
  };
  for (const auto& [name, content] : cases) {
    const auto path = dir / name;
    std::ofstream(path, std::ios::binary) << content;
    INFO(name);
    const LoadedTrace loaded = load_trace_or_error(path.string());
    CHECK_FALSE(loaded.trace);
    CHECK_FALSE(loaded.error.empty());
    CHECK(loaded.error.find('\n') == std::string::npos);
    VizCliOptions cli;
    cli.screenshot = (dir / (name + ".png")).string();
    CHECK(viz_main({path.string()}, cli) == 2);
    CHECK_FALSE(std::filesystem::exists(cli.screenshot));
  }
  CHECK_FALSE(load_trace_or_error((dir / "missing.json").string()).trace);

  // The good file loads and renders through the command-line entry point.
  VizCliOptions cli;
  cli.screenshot = (dir / "good.png").string();
  CHECK(viz_main({good.string()}, cli) == 0);
  CHECK(std::filesystem::exists(cli.screenshot));
  cli.compare = true;
  CHECK(viz_main({good.string()}, cli) == 2);  // --compare needs two
  CHECK(viz_main({good.string(), good.string()}, cli) == 0);
}

TEST_CASE("a trace file written by the runtime's writer (fixture) renders", "[viz]") {
  const auto fixture =
      std::filesystem::path(MGPU_SOURCE_DIR) / "tests" / "data" / "traces" / "small_2rank.json";
  const LoadedTrace loaded = load_trace_or_error(fixture.string());
  REQUIRE(loaded.trace);
  CHECK(loaded.error.empty());
  VizCliOptions cli;
  cli.screenshot = (out_dir() / "fixture.png").string();
  cli.width = 900;
  cli.height = 500;
  CHECK(viz_main({fixture.string()}, cli) == 0);
  CHECK(Image(cli.screenshot).w == 900);
}

TEST_CASE("without a display: one clear line and exit code 2", "[viz]") {
  const char* display = std::getenv("DISPLAY");
  const std::string saved = display ? display : "";
  unsetenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  const std::string saved_wayland = wayland ? wayland : "";
  unsetenv("WAYLAND_DISPLAY");
  const auto png = out_dir() / "no-display.png";
  CHECK(render_screenshot(one_f_one_b_options(), png.string(), 320, 200) == 2);
  CHECK_FALSE(std::filesystem::exists(png));
  if (!saved.empty()) setenv("DISPLAY", saved.c_str(), 1);
  if (!saved_wayland.empty()) setenv("WAYLAND_DISPLAY", saved_wayland.c_str(), 1);
}

namespace {
// The lowest row with a pixel of another colour than the bottom-right corner's (the background).
int last_drawn_row(const Image& img) {
  const ImU32 background = img.at(img.w - 1, img.h - 1);
  for (int y = img.h - 1; y >= 0; --y)
    for (int x = 0; x < img.w; ++x)
      if (img.at(x, y) != background) return y;
  return -1;
}
}  // namespace

TEST_CASE("compare lays runs side by side on one time scale; the screenshot fits its content",
          "[viz]") {
  viz::testing::PipelineSpec gpipe;
  gpipe.schedule = viz::testing::Schedule::gpipe;
  DashboardOptions compare = one_f_one_b_options();
  compare.traces.insert(compare.traces.begin(), viz::testing::synthetic_pipeline(gpipe));
  compare.labels = {"GPipe", "1F1B"};  // columns: the default
  Dashboard d(compare);
  const auto png = out_dir() / "compare-columns.png";
  REQUIRE(render_screenshot(d, png.string(), 1600, 0) == 0);  // height 0: fit the content
  const Image img(png);
  REQUIRE(img.w == 1600);
  // Side by side: both runs' lanes start at the same height, the second in the right half, and a
  // second has the same width in pixels in both columns.
  CHECK(d.layout(1).top == d.layout(0).top);
  CHECK(d.axis(1).x0 > 800);
  CHECK(d.axis(0).x0 + d.axis(0).width < d.axis(1).x0);
  CHECK(d.axis(1).seconds_per_pixel() == Approx(d.axis(0).seconds_per_pixel()));
  // Each run's first forward is drawn in its own column, from its own step start.
  const Palette& pal = palette(false);
  for (int v = 0; v < 2; ++v) {
    for (const trace::Event& e : d.views()[v].trace().events) {
      if (e.cat != trace::cat::forward || e.rank != 0) continue;
      const double x = d.axis(v).to_px(e.start + 0.2 * e.dur);
      CHECK(img.at(x, d.layout(v).lane_top(0, Lane::compute) + 4) == pal.forward);
      break;
    }
  }
  // Fitted height: the summary's last row is inside the image, with no empty band under it.
  CHECK(img.h == std::ceil(d.content_height()));
  const int last = last_drawn_row(img);
  CHECK(last > img.h - 40);
  // Every rank's memory strip and the whole summary of both runs are inside: their content
  // ends above the image's bottom (the measured content height is what was drawn).
  CHECK(d.layout(1).top + d.layout(1).total_height(4) < img.h);
}

TEST_CASE(
    "an 8-rank run at the default width: the screenshot grows to show every strip and the "
    "summary",
    "[viz]") {
  viz::testing::PipelineSpec eight;
  eight.stages = 8;
  DashboardOptions options;
  options.traces.push_back(viz::testing::synthetic_pipeline(eight));
  Dashboard d(options);
  const auto png = out_dir() / "eight-ranks.png";
  REQUIRE(render_screenshot(d, png.string(), 1600, 0) == 0);
  const Image img(png);
  CHECK(img.h > 900);  // the old fixed 1600x900 cut the last strips and the summary off
  CHECK(img.h == std::ceil(d.content_height()));
  CHECK(last_drawn_row(img) > img.h - 40);
}

TEST_CASE("a fitted step starts at the left edge: nothing of the step before it is drawn",
          "[viz]") {
  Dashboard d(one_f_one_b_options());
  const auto png = out_dir() / "step-edge.png";
  REQUIRE(render_screenshot(d, png.string(), 1280, 0) == 0);
  // The ruler's 0 (the shown step's first event) is the first pixel of the lanes.
  CHECK(d.axis().t0 == Approx(d.axis().origin));
  CHECK(d.axis().to_px(d.axis().origin) == Approx(d.axis().x0));
}

TEST_CASE("model states only: the memory strips scale to parameters, gradients, optimizer state",
          "[viz]") {
  // The synthetic run holds 200 MiB parameters, 0/200 MiB gradients, 400 MiB optimizer state and
  // 40 MiB per stashed micro-batch. GPU 0 stashes 4: with every category the states fill
  // 800 / 960 of the scale; alone they fill the whole strip, so a point at 90% of the strip's
  // height is optimizer state only in that view.
  const Palette& pal = palette(false);
  ImU32 seen[2];
  for (int states = 0; states < 2; ++states) {
    DashboardOptions options = one_f_one_b_options();
    options.model_states_only = states == 1;
    Dashboard d(options);
    const auto png = out_dir() / (states ? "memory-states.png" : "memory-all.png");
    REQUIRE(render_screenshot(d, png.string(), 1280, 0) == 0);
    const Image img(png);
    // GPU 0's strip: the first strip under the lanes; find its optimizer-state band at the
    // time of the step's peak from the bottom up.
    const RankSummary& s = d.views()[0].summary(0);
    const double x = d.axis().to_px(s.peak_time) + 2;
    int top = -1;  // highest optimizer-state pixel in the column of the peak
    for (int y = img.h - 1; y > d.layout(0).top + d.layout(0).total_height(4); --y)
      if (img.at(x, y) == pal.memory[2]) top = y;
    REQUIRE(top > 0);
    int bottom = top;
    while (img.at(x, bottom + 1) == pal.memory[2]) ++bottom;
    seen[states] = static_cast<ImU32>(bottom - top);
  }
  // 400 MiB of optimizer state: 400/(960*1.08) of a strip vs 400/(800*1.08); taller alone.
  CHECK(seen[1] > seen[0] * 1.1);
}

TEST_CASE("viz --zoom opens on a window of the shown step: a 0.1 ms hop becomes wide and legible",
          "[viz]") {
  // The synthetic step is about 30 ms long: at 1280 px a 0.1 ms send is about 4 px. A 1 ms window
  // makes it about a tenth of the width, with its label.
  const Palette& pal = palette(false);
  DashboardOptions options = one_f_one_b_options();
  options.zoom = TimeWindow{10e-3, 11e-3};
  Dashboard d(options);
  const auto png = out_dir() / "zoom.png";
  REQUIRE(render_screenshot(d, png.string(), 1280, 0) == 0);
  const Image img(png);
  const TimeAxis& axis = d.axis();
  CHECK(axis.t0 - axis.origin == Approx(10e-3));
  CHECK(axis.t1 - axis.origin == Approx(11e-3));
  int wide_hops = 0;
  for (const trace::Event& e : d.views()[0].trace().events) {
    if (e.lane != Lane::comm || e.start < axis.t0 || e.end() > axis.t1) continue;
    const double width = axis.to_px(e.end()) - axis.to_px(e.start);
    CHECK(width > axis.width * 0.09);
    CHECK(img.at(axis.to_px(e.start) + 2, d.layout(0).lane_top(e.rank, Lane::comm) + 2) ==
          pal.comm);
    ++wide_hops;
  }
  CHECK(wide_hops > 0);

  // "Fit" shows the whole step again: the zoom is where the dashboard opens, not a clamp.
  d.fit();
  REQUIRE(render_screenshot(d, png.string(), 1280, 0) == 0);
  CHECK(d.axis().t1 - d.axis().t0 > 20e-3);
}

TEST_CASE("viz --zoom outside the shown step is one line and exit code 2", "[viz]") {
  const auto fixture =
      std::filesystem::path(MGPU_SOURCE_DIR) / "tests" / "data" / "traces" / "small_2rank.json";
  VizCliOptions cli;
  cli.screenshot = (out_dir() / "zoom-outside.png").string();
  cli.zoom = TimeWindow{100, 101};
  std::ostringstream err;
  CHECK(viz_main({fixture.string()}, cli, err) == 2);
  const std::string error = err.str();
  CHECK_THAT(error, Catch::Contains("--zoom starts at 100 s but the shown step ends at"));
  CHECK(std::count(error.begin(), error.end(), '\n') == 1);
}

TEST_CASE("a comm event's waiting for a partner is drawn hatched over a lighter colour",
          "[viz][wait]") {
  // GPU 0 receives from 1 ms to 4 ms, of which 2 ms waiting for GPU 1 (which computes 0-3 ms):
  // the first 2 ms are hatched (comm lines over comm_wait), the last 1 ms is solid comm.
  trace::Trace t;
  t.num_ranks = 2;
  auto add = [&](int rank, Lane lane, double start, double dur, const char* cat, double wait) {
    trace::Event e;
    e.name = e.cat = cat;
    e.rank = rank;
    e.lane = lane;
    e.start = start;
    e.dur = dur;
    e.wait = wait;
    t.events.push_back(e);
  };
  add(0, Lane::compute, 0, 1e-3, trace::cat::forward, 0);
  add(0, Lane::comm, 1e-3, 3e-3, trace::cat::comm, 2e-3);
  add(1, Lane::compute, 0, 3e-3, trace::cat::forward, 0);
  add(1, Lane::comm, 3e-3, 1e-3, trace::cat::comm, 0);
  DashboardOptions options;
  options.traces.push_back(t);
  Dashboard d(options);
  CHECK(d.views()[0].summary(0).comm_wait == Approx(2e-3));
  CHECK(d.views()[0].summary(0).comm_wire == Approx(1e-3));
  const auto png = out_dir() / "comm-wait.png";
  REQUIRE(render_screenshot(d, png.string(), 1280, 0) == 0);  // as tall as its content
  const Image img(png);
  const Palette& pal = palette(false);
  const TimeAxis& axis = d.axis();
  const LaneLayout& layout = d.layout(0);
  auto count_in = [&](int rank, double t0, double t1, ImU32 colour) {
    int n = 0;
    const double y = layout.lane_top(rank, Lane::comm) + layout.lane_height / 2;
    for (double x = axis.to_px(t0) + 2; x < axis.to_px(t1) - 2; x += 1) n += img.at(x, y) == colour;
    return n;
  };
  const int waiting = count_in(0, 1e-3, 3e-3, pal.comm_wait);
  const int lines = count_in(0, 1e-3, 3e-3, pal.comm);
  INFO("waiting part: " << waiting << " comm_wait pixels, " << lines << " comm pixels");
  CHECK(waiting > 20);                                 // the lighter colour under the hatch
  CHECK(lines > 20);                                   // and the hatch's lines in the comm colour
  CHECK(count_in(0, 3e-3, 4e-3, pal.comm_wait) == 0);  // the wire part is solid comm
  CHECK(count_in(0, 3.2e-3, 3.8e-3, pal.comm) > 10);
  CHECK(count_in(1, 3e-3, 4e-3, pal.comm_wait) == 0);  // GPU 1 did not wait
}

TEST_CASE("a mixture-of-experts trace shows its tokens per expert under the summary",
          "[viz][experts]") {
  // 2 GPUs, one MoE block (block 0) with 4 experts: each GPU's "dispatch counts" event carries
  // its kept tokens per expert, and its dispatch all-to-all is labelled "dispatch".
  auto make = [](bool with_counts) {
    trace::Trace t;
    t.num_ranks = 2;
    for (int rank = 0; rank < 2; ++rank) {
      trace::Event f;
      f.name = f.cat = trace::cat::forward;
      f.rank = rank;
      f.dur = 1e-3;
      t.events.push_back(f);
      trace::Event counts = trace::comm_event("all_to_all", 1e-3, 1.1e-3, 16, 8, "ep0");
      counts.rank = rank;
      counts.name = "dispatch counts";
      counts.layer = 0;
      if (with_counts)
        counts.counts =
            rank == 0 ? std::vector<int64_t>{9, 3, 0, 4} : std::vector<int64_t>{7, 1, 2, 6};
      t.events.push_back(counts);
      trace::Event dispatch = trace::comm_event("all_to_all_v", 1.1e-3, 2e-3, 1024, 512, "ep0");
      dispatch.rank = rank;
      dispatch.name = "dispatch";
      dispatch.layer = 0;
      t.events.push_back(dispatch);
    }
    DashboardOptions options;
    options.traces.push_back(t);
    return options;
  };
  Dashboard with(make(true)), without(make(false));
  const auto& loads = with.views()[0].expert_loads();
  REQUIRE(loads.size() == 1);
  CHECK(loads[0].layer == 0);
  CHECK(loads[0].total() == std::vector<int64_t>{16, 4, 2, 10});
  CHECK(without.views()[0].expert_loads().empty());
  const auto png_with = out_dir() / "experts.png", png_without = out_dir() / "no-experts.png";
  REQUIRE(render_screenshot(with, png_with.string(), 1280, 0) == 0);  // as tall as its content
  REQUIRE(render_screenshot(without, png_without.string(), 1280, 0) == 0);
  // The heat map: a title, the expert numbers and three rows (2 GPUs and their sum).
  const Image a(png_with), b(png_without);
  CHECK(a.h >= b.h + 4 * 13);
}

}  // namespace test_dashboard

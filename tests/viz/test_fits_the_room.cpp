// "The classroom fits the room" (issue 50): up to six runs side by side at 1920x1080 with every
// table, bubble line and ruler readable (no two text boxes overprint, rulers with real ticks);
// --versus and --compare take six; a --series keeps the global batch; the classroom prints the
// lesson's bubble; legend swatches look like the timeline; labels contrast with what is behind
// them; 16 ranks fit a projector with their summary; DualPipe's slider shows the value used; the
// memory strips hide (test_projector.cpp: 16 ranks, the slider, the memory toggle). Run under
// xvfb-run -a (the screenshots need a display).
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "lessons/classroom.h"
#include "lessons/exercise_views.h"
#include "lessons/pipeline.h"
#include "lessons/viz_command.h"
#include "unit/mgpu_cli.h"
#include "viz/dashboard.h"
#include "viz/layout.h"
#include "viz/panels.h"
#include "viz/png_image.h"

namespace test_fits_the_room {

using namespace mgpu;
using namespace mgpu::viz;
namespace fs = std::filesystem;

namespace {
const std::vector<std::string> kSix = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"};

fs::path out_dir() {
  auto dir = fs::path(MGPU_BINARY_DIR) / "test_viz_out" / "room";
  fs::create_directories(dir);
  return dir;
}
int run_viz(const std::vector<std::string>& args, std::string& error) {
  std::ostringstream out, err;
  const int rc = lessons::cmd_viz(args, out, err);
  error = err.str();
  return rc;
}
MeasureText monospace(float px) {
  return [px](const std::string& s) { return px * static_cast<float>(s.size()); };
}
bool is_tick_label(const std::string& s) {
  static const std::regex tick(R"(^(0|-?[0-9]+(\.[0-9]+)?( (ns|us|ms|s))?)$)");
  return std::regex_match(s, tick);
}

// No two text boxes overprint; each lies inside the picture; each view has a ruler of 3+ labels.
void check_readable(const Dashboard& d, float width, size_t views) {
  const std::vector<TextBox>& boxes = d.text_boxes();
  REQUIRE(boxes.size() > 20);
  for (size_t i = 0; i < boxes.size(); ++i) {
    INFO(boxes[i].text << " in view " << boxes[i].view);
    CHECK(boxes[i].x0 >= 0);
    CHECK(boxes[i].x1 <= width);
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      INFO("overlaps " << boxes[j].text << " in view " << boxes[j].view);
      CHECK_FALSE(boxes[i].overlaps(boxes[j]));
    }
  }
  for (size_t v = 0; v < views; ++v) {
    const auto ticks = std::count_if(boxes.begin(), boxes.end(), [&](const TextBox& b) {
      return b.view == static_cast<int>(v) && is_tick_label(b.text);
    });
    INFO("view " << v);
    CHECK(ticks >= 3);
    const bool bubble_line = std::any_of(boxes.begin(), boxes.end(), [&](const TextBox& b) {
      return b.view == static_cast<int>(v) && b.text.find("bubble ") != std::string::npos &&
             b.text.find("measured") != std::string::npos;
    });
    CHECK(bubble_line);
  }
}

viz::RerunHook versus_hook(const std::vector<std::string>& schedules) {
  viz::RerunHook hook{lessons::classroom_rerun, lessons::classroom_parameters()};
  hook.split_by = "schedule";
  hook.split_values = schedules;
  return hook;
}
}  // namespace

TEST_CASE("layout: rulers label a narrow column, tables keep the bubble, rows shrink to fit",
          "[viz]") {
  TimeAxis axis;
  axis.x0 = 60;
  axis.width = 240;  // a sixth of 1920, less the label column
  axis.fit(0, 3.4e-3, 0);
  const auto labels = ruler_labels(axis, monospace(9), 12);
  REQUIRE(labels.size() >= 3);
  for (size_t i = 1; i < labels.size(); ++i)
    CHECK(labels[i - 1].x + labels[i - 1].width + 12 <= labels[i].x);
  CHECK(labels.back().x + labels.back().width <= axis.x0 + axis.width);

  const std::vector<float> widths(kSummaryColumns, 80);
  const auto cols = summary_columns(widths, 330);  // four columns fit
  REQUIRE(cols.size() == 4);
  CHECK(cols[0] == SummaryColumn::rank);
  CHECK(std::count(cols.begin(), cols.end(), SummaryColumn::bubble) == 1);
  CHECK(std::count(cols.begin(), cols.end(), SummaryColumn::peak) == 1);
  CHECK(summary_columns(widths, 2000).size() == kSummaryColumns);
  CHECK(summary_rows_per_block(16, 800, 16, 1880, 8) == 8);    // two blocks of 8
  CHECK(summary_rows_per_block(16, 1000, 16, 1880, 8) == 16);  // one does not fit twice
  const RowSizes natural{36, 45}, minimum{13, 28};
  CHECK(fit_rows(4, 1000, natural, minimum, 16, 10).lane == 36);  // room enough: unchanged
  const RowSizes shrunk = fit_rows(16, 1400, natural, minimum, 16, 10);
  CHECK(shrunk.lane < 36);
  CHECK(shrunk.strip >= 28);
  CHECK(shrunk.fits);
  CHECK(16 * (2 * shrunk.lane + 16 + shrunk.strip + 10) <= 1400);
  CHECK_FALSE(fit_rows(64, 900, natural, minimum, 16, 10).fits);  // the page scrolls
}

TEST_CASE("six compared runs at 1920: no text overprints, rulers have ticks, bubbles readable",
          "[viz]") {
  for (bool presentation : {false, true}) {
    DashboardOptions opt;
    opt.presentation = presentation;
    for (const std::string& s : kSix) {
      nlohmann::json params = nlohmann::json::object({{"schedule", s}, {"stages", 4}});
      opt.traces.push_back(lessons::classroom_rerun(params));
      opt.labels.push_back(s + ".json");
    }
    Dashboard d(opt);
    const auto png = out_dir() / (presentation ? "six-presentation.png" : "six.png");
    REQUIRE(render_screenshot(d, png.string(), 1920, 0) == 0);
    INFO("presentation " << presentation);
    check_readable(d, 1920, kSix.size());
    if (presentation) CHECK(d.content_height() <= 1080);
  }
}

TEST_CASE("versus takes six schedules side by side in 1920x1080 and refuses seven", "[viz]") {
  DashboardOptions opt;
  opt.presentation = true;
  opt.rerun = versus_hook(kSix);
  Dashboard d(opt);
  REQUIRE(d.views().size() == 6);
  REQUIRE(render_screenshot(d, (out_dir() / "versus-six.png").string(), 1920, 0) == 0);
  check_readable(d, 1920, 6);
  CHECK(d.content_height() <= 1080);

  std::string error;
  CHECK(run_viz({"--versus", "gpipe,1f1b,interleaved,zb-h1,zbv,dualpipev", "--presentation",
                 "--screenshot", (out_dir() / "cli-six.png").string(), "--width", "1920"},
                error) == 0);
  CHECK(run_viz({"--versus", "gpipe,1f1b,interleaved,zb-h1,zbv,dualpipev,dualpipe"}, error) == 2);
  CHECK_THAT(error, Catch::Contains("two to six schedules (got 7)"));
  CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  const std::vector<std::string> seven(7, "a.json");
  std::ostringstream err;
  viz::VizCliOptions cli;
  cli.compare = true;
  CHECK(viz::viz_main(seven, cli, err) == 2);
  CHECK_THAT(err.str(), Catch::Contains("two to 6 traces (got 7)"));
}

TEST_CASE("a micro-batch series keeps the global batch and says it on every slide", "[viz]") {
  for (int m : {1, 2, 8, 16}) {
    const trace::Trace t = lessons::classroom_rerun({{"microbatches", m}});
    CHECK(t.metadata["config"]["batch"] == 16);
    CHECK(t.metadata["config"]["microbatches"] == m);
    CHECK_THAT(describe_run(TraceView(t)),
               Catch::Contains(fmt::format("batch 16 = {} micro-batches of {}", m, 16 / m)));
  }
  std::string error;
  const std::string png = (out_dir() / "series.png").string();
  CHECK(run_viz({"--series", "microbatches=1..4", "--screenshot", png}, error) == 2);
  CHECK_THAT(error, Catch::Contains("the global batch 16 does not split into 3 micro-batches"));
  CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(out_dir() / "series-microbatches-1.png"));  // refused before any run
  CHECK(run_viz({"--series", "microbatches=2,4,16", "--set", "stages=2", "--screenshot", png,
                 "--width", "800", "--height", "400"},
                error) == 0);
  CHECK(fs::exists(out_dir() / "series-microbatches-16.png"));
  CHECK(run_viz({"--series", "microbatches=32", "--set", "batch=32", "--screenshot", png, "--width",
                 "800", "--height", "400"},
                error) == 0);
}

TEST_CASE("classroom and lesson print the same bubble for the same schedule", "[viz]") {
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    const TraceView classroom(lessons::classroom_rerun({{"schedule", schedule}}));
    lessons::CommonOptions c;  // `mgpu run pipeline`'s defaults: 4 ranks, 8 layers, 20 steps
    c.ranks = 4;
    c.layers = 8;
    c.steps = 20;
    c.quiet = true;
    lessons::PipelineOptions p;
    p.schedule = schedule;
    std::ostringstream quiet;
    const lessons::PipelineResult lesson = lessons::train_pipeline(c, p, quiet);
    const TraceView lesson_view(lesson.trace);
    REQUIRE(lesson.measured_bubble.size() == 4);
    for (int r = 0; r < 4; ++r) {
      INFO(schedule << " rank " << r);
      CHECK(format_percent(classroom.summary(r).bubble) ==
            format_percent(lesson.measured_bubble[r]));
      CHECK(lesson_view.summary(r).bubble == Approx(lesson.measured_bubble[r]).epsilon(1e-12));
    }
  }
}

TEST_CASE("legend swatches look like the timeline; labels contrast with what is behind them",
          "[viz]") {
  for (bool presentation : {false, true}) {
    const Palette& p = palette(presentation);
    const Hatch bubble = bubble_hatch(p), wait = comm_wait_hatch(p);
    CHECK(bubble.fill != wait.fill);  // a bubble is not a comm wait
    CHECK(bubble.lines != wait.lines);
    CHECK(bubble.rising != wait.rising);
    for (ImU32 behind :
         {p.comm_wait, p.comm, p.forward, p.backward, p.backward_weight, p.optimizer, p.compute})
      CHECK(contrast_ratio(behind, readable_text(behind, p.cell_text)) >= 4.5);
  }
  DashboardOptions opt;
  opt.presentation = true;
  opt.traces.push_back(lessons::classroom_rerun({{"schedule", "gpipe"}}));
  Dashboard d(opt);
  const auto png = out_dir() / "legend.png";
  REQUIRE(render_screenshot(d, png.string(), 1600, 0) == 0);
  const viz::testing::Image image(png);
  REQUIRE(!image.rgba.empty());
  auto colours_in = [&](const std::string& key) {
    std::set<ImU32> seen;
    for (const TextBox& b : d.text_boxes())
      if (b.text == "swatch: " + key)
        for (int y = static_cast<int>(b.y0) + 1; y < static_cast<int>(b.y1) - 1; ++y)
          for (int x = static_cast<int>(b.x0) + 1; x < static_cast<int>(b.x1) - 1; ++x)
            seen.insert(image.at(x, y));
    return seen;
  };
  const Palette& p = palette(true);
  const std::set<ImU32> idle = colours_in("idle (bubble)"),
                        waiting = colours_in("comm waiting for a partner");
  CHECK(idle.count(p.idle));        // the bubble's fill ...
  CHECK(idle.count(p.idle_hatch));  // ... and its lines, as the timeline draws them
  CHECK_FALSE(idle.count(p.comm_wait));
  CHECK(waiting.count(p.comm_wait));
  CHECK_FALSE(waiting.count(p.idle));
}

}  // namespace test_fits_the_room

// The projector (issue 50): a 16-rank hybrid run fits 1920x1080 in presentation mode with its
// summary (rows shrink, the memory strips go first, the table splits into two blocks of ranks),
// more ranks than fit keep a minimum row height and the page scrolls; DualPipe's virtual_stages
// slider shows the value the run used; the memory strips hide (option and toggle).
// Run under xvfb-run -a (the screenshots need a display).
#include <catch2/catch.hpp>

#include <filesystem>

#include <unistd.h>

#include "core/trace/chrome_trace.h"
#include "lessons/classroom.h"
#include "lessons/viz_command.h"
#include "unit/mgpu_cli.h"
#include "viz/dashboard.h"
#include "viz/synthetic.h"

namespace test_projector {

using namespace mgpu;
using namespace mgpu::viz;
using viz::testing::PipelineSpec;
using viz::testing::synthetic_pipeline;
namespace fs = std::filesystem;

namespace {
constexpr double kPresentationFont = 24;  // 15 px x 1.6 (viz/window.cpp, viz/ui.h)
fs::path out_dir() {
  auto dir = fs::path(MGPU_BINARY_DIR) / "test_viz_out" / "projector";
  fs::create_directories(dir);
  return dir;
}
// The lesson's 16-rank hybrid (dp 2 x pp 4 x tp 2), two steps.
trace::Trace hybrid_16() {
  const std::string path = (out_dir() / "hybrid16.json").string();
  const auto run =
      mgpu::testing::run_mgpu({"run", "hybrid", "--ranks", "16", "--dp", "2", "--tp", "2", "--pp",
                               "4", "--steps", "2", "--trace", path, "-q"});
  if (run.code != 0) FAIL(run.err);
  return trace::read_chrome_trace(path);
}
int count_text(const Dashboard& d, const std::string& part) {
  return static_cast<int>(
      std::count_if(d.text_boxes().begin(), d.text_boxes().end(),
                    [&](const TextBox& b) { return b.text.find(part) != std::string::npos; }));
}
}  // namespace

TEST_CASE("16 ranks fit a 1920x1080 projector with their summary", "[viz]") {
  DashboardOptions opt;
  opt.presentation = true;
  opt.traces.push_back(hybrid_16());
  Dashboard d(opt);
  REQUIRE(render_screenshot(d, (out_dir() / "hybrid16.png").string(), 1920, 0) == 0);
  CHECK(d.content_height() <= 1080);
  CHECK(d.rows_shrunk());
  CHECK(d.memory_hidden_to_fit());  // the strips go first, and a line says so
  CHECK(count_text(d, "memory strips hidden") == 1);
  const LaneLayout& l = d.layout(0);
  CHECK(l.group_top(15) + l.group_height() <= 1080);  // the last GPU's row is on screen
  CHECK(l.group_height() >= kPresentationFont);       // its label fits its row
  // The summary: two side-by-side blocks of 8 ranks, both on screen.
  int blocks = 0;
  for (const TextBox& b : d.text_boxes())
    if (b.text.rfind("table summary0 block", 0) == 0) {
      ++blocks;
      CHECK(b.y1 <= 1080);
      CHECK(b.x1 <= 1920);
    }
  CHECK(blocks == 2);
  for (int r = 0; r < 16; ++r) {
    INFO("GPU " << r);
    CHECK(count_text(d, "GPU " + std::to_string(r) + "  dp") == 1);  // its row label, once
  }
  // Without presentation, a picture without --height is as tall as its content: nothing shrinks.
  DashboardOptions plain;
  plain.traces.push_back(hybrid_16());
  Dashboard p(plain);
  REQUIRE(render_screenshot(p, (out_dir() / "hybrid16-plain.png").string(), 1920, 0) == 0);
  CHECK_FALSE(p.rows_shrunk());
  CHECK(count_text(p, "peak ") == 16);  // every memory strip
}

TEST_CASE("more ranks than fit keep a minimum row and the page scrolls", "[viz]") {
  PipelineSpec spec;
  spec.stages = 64;
  DashboardOptions opt;
  opt.presentation = true;
  opt.traces.push_back(synthetic_pipeline(spec));
  Dashboard d(opt);
  REQUIRE(render_screenshot(d, (out_dir() / "ranks64.png").string(), 1920, 1080) == 0);
  CHECK(d.rows_shrunk());
  CHECK(d.layout(0).group_height() >= kPresentationFont);  // labels still fit their rows
  CHECK(d.content_height() > 1080);                        // the rest is below: scroll
}

TEST_CASE("DualPipe's virtual_stages slider shows the 2 the run used", "[viz]") {
  DashboardOptions opt;
  opt.rerun = RerunHook{lessons::classroom_rerun, lessons::classroom_parameters()};
  Dashboard d(opt);
  CHECK(d.shown_parameter("virtual_stages") == 1);
  REQUIRE(d.set_parameter("schedule", "dualpipe"));
  CHECK(d.views()[0].trace().metadata["config"]["virtual_stages"] == 2);
  CHECK(d.shown_parameter("virtual_stages") == 2);  // as the header says
  REQUIRE(d.set_parameter("schedule", "1f1b"));
  CHECK(d.shown_parameter("virtual_stages") == 1);  // what was asked, and 1F1B used it
  REQUIRE(d.set_parameter("schedule", "interleaved"));
  REQUIRE(d.set_parameter("virtual_stages", 2));
  CHECK(d.shown_parameter("virtual_stages") == 2);
  CHECK(d.shown_parameter("nosuch").is_null());
}

TEST_CASE("memory strips hide: --memory off and the toggle", "[viz]") {
  PipelineSpec spec;
  DashboardOptions opt;
  opt.traces.push_back(synthetic_pipeline(spec));
  Dashboard shown(opt);
  REQUIRE(render_screenshot(shown, (out_dir() / "memory-on.png").string(), 1200, 0) == 0);
  CHECK(count_text(shown, "peak ") == spec.stages);
  opt.traces.push_back(synthetic_pipeline(spec));
  opt.traces.erase(opt.traces.begin());
  opt.show_memory = false;
  Dashboard hidden(opt);
  REQUIRE(render_screenshot(hidden, (out_dir() / "memory-off.png").string(), 1200, 0) == 0);
  CHECK(count_text(hidden, "peak ") == 0);
  CHECK(hidden.content_height() < shown.content_height());
  const std::string fixture =
      (fs::path(MGPU_SOURCE_DIR) / "tests" / "data" / "traces" / "small_2rank.json").string();
  std::ostringstream out, err;
  CHECK(lessons::cmd_viz(
            {fixture, "--memory", "off", "--screenshot", (out_dir() / "cli-off.png").string()}, out,
            err) == 0);
  CHECK(lessons::cmd_viz({fixture, "--memory", "none"}, out, err) == 2);
}

}  // namespace test_projector

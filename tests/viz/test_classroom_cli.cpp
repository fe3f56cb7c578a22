// Classroom mode from the command line: --set, --series and --versus (two schedules side by side
// under the same sliders), their one-line errors, and the projector layout (1920 wide,
// presentation, two runs) fitting 1080 rows. Run under xvfb-run -a (the screenshots open a hidden
// window).
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "lessons/classroom.h"
#include "lessons/viz_command.h"
#include "viz/dashboard.h"

namespace test_classroom_cli {

using namespace mgpu;

namespace {
int run_viz(const std::vector<std::string>& args, std::string& error) {
  std::ostringstream out, err;
  const int rc = lessons::cmd_viz(args, out, err);
  error = err.str();
  return rc;
}
std::filesystem::path out_dir() {
  auto dir = std::filesystem::path(MGPU_BINARY_DIR) / "test_viz_out" / "classroom";
  std::filesystem::create_directories(dir);
  return dir;
}
}  // namespace

TEST_CASE("classroom --set sets the sliders and a bad name or value is one line and exit 2",
          "[viz]") {
  nlohmann::json params = lessons::classroom_parameters();
  REQUIRE_FALSE(lessons::apply_settings(params, "schedule=gpipe,stages=2,microbatches=16"));
  for (const auto& spec : params) {
    if (spec["name"] == "schedule") CHECK(spec["value"] == "gpipe");
    if (spec["name"] == "stages") CHECK(spec["value"] == 2);
    if (spec["name"] == "microbatches") CHECK(spec["value"] == 16);
  }
  const nlohmann::json before = params;
  CHECK(lessons::apply_settings(params, "microbatches=33").value() ==
        "--set: microbatches=33 is not a whole number from 1 to 32");
  CHECK(lessons::apply_settings(params, "stages=2,color=red")->find("no parameter 'color'") !=
        std::string::npos);
  CHECK(params == before);  // a bad list changes nothing, not even its good items
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--set", "schedule=fast"},
        {"--set", "stages"},
        {"--series", "microbatches=1..40", "--screenshot", "x.png"},
        {"--series", "microbatches=1..4"},
        {"--versus", "gpipe"},
        {"--layout", "diagonal"}}) {
    std::string error;
    INFO(args[0] << " " << args[1]);
    CHECK(run_viz(args, error) == 2);
    CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  }
}

TEST_CASE("classroom --series writes one PNG per value", "[viz]") {
  const auto png = out_dir() / "m.png";
  for (int m : {1, 2, 4})
    std::filesystem::remove(out_dir() / ("m-microbatches-" + std::to_string(m) + ".png"));
  std::string error;
  // A list of micro-batch counts that divide the global batch (16): the series keeps it.
  REQUIRE(run_viz({"--series", "microbatches=1,2,4", "--set", "stages=2", "--screenshot",
                   png.string(), "--width", "800", "--height", "400"},
                  error) == 0);
  for (int m : {1, 2, 4})
    CHECK(std::filesystem::exists(out_dir() / ("m-microbatches-" + std::to_string(m) + ".png")));
  const lessons::Series s{"microbatches", 1, 32};
  CHECK(lessons::series_png_path("out/m.png", s, 8) == "out/m-microbatches-08.png");
}

TEST_CASE("classroom --series checks every name it derives before the first run", "[viz]") {
  const auto png = out_dir() / "blocked.png";
  const auto first = out_dir() / "blocked-microbatches-1.png";
  const auto third = out_dir() / "blocked-microbatches-4.png";
  std::filesystem::remove(first);
  std::filesystem::remove_all(third);
  std::filesystem::create_directories(third);  // a folder where the third screenshot would go
  std::string error;
  CHECK(run_viz({"--series", "microbatches=1,2,4", "--set", "stages=2", "--screenshot",
                 png.string(), "--width", "800", "--height", "400"},
                error) == 2);
  CHECK_THAT(error, Catch::Contains("blocked-microbatches-4.png' is a folder, not a regular file"));
  CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  CHECK_FALSE(std::filesystem::exists(first));  // refused before any run
  std::filesystem::remove_all(third);
}

TEST_CASE("classroom --versus puts two schedules side by side under the same sliders in 1920x1080",
          "[viz]") {
  viz::DashboardOptions opt;
  opt.presentation = true;
  viz::RerunHook hook{lessons::classroom_rerun, lessons::classroom_parameters()};
  REQUIRE_FALSE(lessons::apply_settings(hook.params, "stages=4,microbatches=8"));
  hook.split_by = "schedule";
  hook.split_values = {"gpipe", "1f1b"};
  opt.rerun = hook;
  viz::Dashboard d(opt);
  REQUIRE(d.views().size() == 2);
  const auto png = out_dir() / "versus.png";
  REQUIRE(viz::render_screenshot(d, png.string(), 1920, 0) == 0);
  CHECK(d.content_height() <= 1080);
  CHECK(d.layout(0).top == d.layout(1).top);  // side by side
  CHECK(d.axis(1).x0 > 960);
  // The same sliders drive both: one change re-runs both runs with it.
  REQUIRE(d.set_parameter("microbatches", 16));
  for (const viz::TraceView& v : d.views())
    CHECK(v.trace().metadata["config"]["microbatches"] == 16);
  CHECK(d.views()[0].trace().metadata["config"]["schedule"] == "gpipe");
  CHECK(d.views()[1].trace().metadata["config"]["schedule"] == "1f1b");
  // GPipe stashes every micro-batch's activations, 1F1B at most `stages`: the memory contrast.
  CHECK(d.views()[0].summary(0).peak_bytes > d.views()[1].summary(0).peak_bytes);
}

TEST_CASE("viz --zoom FROM..TO: a bad window is one line and exit 2", "[viz]") {
  const std::string fixture =
      (std::filesystem::path(MGPU_SOURCE_DIR) / "tests" / "data" / "traces" / "small_2rank.json")
          .string();
  const std::string png = (out_dir() / "zoom.png").string();
  for (const char* window :
       {"0.6ms..0.2ms", "0.2..0.6", "1ms", "-1ms..2ms", "1e999s..2s", "0us..1e300s"}) {
    std::string error;
    INFO(window);
    CHECK(run_viz({fixture, "--zoom", window, "--screenshot", png}, error) == 2);
    CHECK_THAT(error, Catch::Contains("e.g. --zoom 0.2ms..0.6ms"));
    CHECK(std::count(error.begin(), error.end(), '\n') == 1);
  }
  std::string error;
  CHECK(run_viz({"--zoom", "0.2ms..0.6ms"}, error) == 2);  // classroom mode has no step to zoom
  CHECK_THAT(error, Catch::Contains("--zoom needs a trace"));
  CHECK(run_viz({fixture, "--zoom", "0us..50us", "--screenshot", png}, error) == 0);
}

}  // namespace test_classroom_cli

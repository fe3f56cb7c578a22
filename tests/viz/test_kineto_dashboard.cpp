// PyTorch profiler (Kineto) traces in the dashboard: a folder or a run's files open as one run,
// beside a modeled run with --compare (which prints the step-time ratio), and a bad file is one
// line and exit code 2 before any window or PNG.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "viz/dashboard.h"

namespace test_kineto_dashboard {

using namespace mgpu::viz;

namespace {

const std::filesystem::path kRun =
    std::filesystem::path(MGPU_SOURCE_DIR) / "tests" / "data" / "kineto" / "gloo-cpu";

std::filesystem::path png_dir() {
  const auto dir = std::filesystem::temp_directory_path() / "mgpu_viz_kineto";
  std::filesystem::create_directories(dir);
  return dir;
}

// What `f` prints on std::cout.
template <class F>
std::string stdout_of(F f) {
  std::ostringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  f();
  std::cout.rdbuf(old);
  return captured.str();
}

}  // namespace

TEST_CASE("a PyTorch profiler run opens as one run: its folder, or its files", "[viz]") {
  const LoadedTrace folder = load_trace_or_error(kRun.string());
  REQUIRE(folder.trace);
  CHECK(folder.trace->num_ranks == 2);
  CHECK(folder.trace->metadata["source"] == "kineto");
  const LoadedTrace files =
      load_run_or_error({(kRun / "rank-0.json").string(), (kRun / "rank-1.json").string()});
  REQUIRE(files.trace);
  CHECK(files.trace->events == folder.trace->events);

  VizCliOptions cli;
  cli.screenshot = (png_dir() / "gloo.png").string();
  std::filesystem::remove(cli.screenshot);
  CHECK(viz_main({(kRun / "rank-0.json").string(), (kRun / "rank-1.json").string()}, cli) == 0);
  CHECK(std::filesystem::file_size(cli.screenshot) > 1000);
}

TEST_CASE("viz --compare puts a real run beside a modeled one and prints the step-time ratio",
          "[viz]") {
  const auto modeled =
      std::filesystem::path(MGPU_SOURCE_DIR) / "tests" / "data" / "traces" / "small_2rank.json";
  VizCliOptions cli;
  cli.compare = true;
  cli.screenshot = (png_dir() / "compare.png").string();
  int code = -1;
  const std::string out = stdout_of([&] {
    code = viz_main({kRun.string(), modeled.string()}, cli);
  });
  CHECK(code == 0);
  CHECK_THAT(out, Catch::StartsWith("step time gloo-cpu: "));
  CHECK_THAT(out, Catch::Contains("step time small_2rank.json: "));
  CHECK_THAT(out, Catch::Contains("x gloo-cpu)"));
  // Without --compare the project's trace is not a rank of the PyTorch run.
  VizCliOptions one;
  one.screenshot = (png_dir() / "mixed.png").string();
  std::ostringstream err;
  CHECK(viz_main({(kRun / "rank-0.json").string(), modeled.string()}, one, err) == 2);
}

TEST_CASE("a bad PyTorch profiler file is one line and exit code 2", "[viz]") {
  const auto bad = png_dir() / "bad.json";
  std::ofstream(bad) << R"({"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": "soon"}]})";
  VizCliOptions cli;
  cli.screenshot = (png_dir() / "bad.png").string();
  std::filesystem::remove(cli.screenshot);
  std::ostringstream err;
  CHECK(viz_main({bad.string()}, cli, err) == 2);
  const std::string message = err.str();
  CHECK_THAT(message, Catch::Contains("bad.json: traceEvents[0].ts must be a number"));
  CHECK(std::count(message.begin(), message.end(), '\n') == 1);
  CHECK_FALSE(std::filesystem::exists(cli.screenshot));
}

}  // namespace test_kineto_dashboard

// Hostile traces in the dashboard (issue #18, item 1): `mgpu viz` refuses absurd timestamps and
// rank counts with exit 2 and draws nothing, instead of looping, allocating gigabytes or aborting.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "unit/mgpu_cli.h"
#include "viz/view_model.h"

namespace test_hostile_viz {

using mgpu::testing::run_mgpu;
namespace fs = std::filesystem;

namespace {

std::string header(long long num_ranks) {
  return R"({"mgpu": {"format": "mgpu-trace", "version": 1, "num_ranks": )" +
         std::to_string(num_ranks) + R"(}, "traceEvents": [)";
}

std::string event(int pid, const std::string& ts, const std::string& dur) {
  return R"({"ph": "X", "name": "fwd", "cat": "forward", "pid": )" + std::to_string(pid) +
         R"(, "tid": 0, "ts": )" + ts + R"(, "dur": )" + dur + "}";
}

}  // namespace

TEST_CASE("mgpu viz refuses extreme timestamps and rank counts with exit 2", "[viz][hostile]") {
  const fs::path dir =
      fs::temp_directory_path() / ("mgpu_hostile_viz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string png = (dir / "out.png").string();
  struct Case {
    const char* name;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"every 7th ts 1e308", header(2) + event(0, "1", "2") + "," + event(1, "1e308", "2") + "," +
                                 event(0, "5", "1") + "]}"},
      {"ts 1.2e29", header(2) + event(0, "1", "2") + "," + event(1, "1.2e29", "2") + "]}"},
      {"all ts 1e308", header(1) + event(0, "1e308", "1") + "," + event(0, "1e308", "1") + "]}"},
      {"num_ranks 1e9", header(1000000000) + event(0, "1", "2") + "]}"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = (dir / "t.json").string();
    std::ofstream(path) << c.text;
    CHECK(run_mgpu({"viz", path, "--screenshot", png}).code == 2);
    CHECK_FALSE(fs::exists(png));
  }
  fs::remove_all(dir);
}

TEST_CASE("viz --screenshot is refused before any work where --checkpoint would be",
          "[viz][hostile]") {
  // Each of these wrote into a device, exited 0 on a full disk, dumped PNG bytes on the terminal
  // or opened a window that never closed.
  std::vector<std::string> targets = {"", "/dev/null", "/dev/full"};
  if (!fs::is_regular_file("/dev/stdout")) targets.push_back("/dev/stdout");
  for (const std::string& target : targets) {
    CAPTURE(target);
    auto r = run_mgpu({"viz", "--screenshot", target});
    CHECK(r.code == 2);
    CHECK(mgpu::testing::count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("--screenshot"));
    CHECK(r.out.empty());
  }
}

TEST_CASE("viz reads only regular trace files of bounded size", "[viz][hostile]") {
  const fs::path dir =
      fs::temp_directory_path() / ("mgpu_hostile_viz_in_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string png = (dir / "out.png").string();
  const std::string fifo = (dir / "t.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // blocked the reader forever
  const std::string sparse = (dir / "big.json").string();
  std::ofstream(sparse).put('{');
  fs::resize_file(sparse, uintmax_t{600} << 20);  // read whole until bad_alloc; no disk used
  struct Case {
    std::string path, says;
  };
  const std::vector<Case> cases = {
      {fifo, "is a fifo, not a regular file"},
      {"/dev/zero", "is a character device"},
      // A folder is a PyTorch profiler run (one file per rank): its first bad file is named.
      {dir.string(), "big.json: invalid JSON at byte 1 (a NUL byte, which JSON text never holds)"},
      {sparse, "above the limit of 512 MiB"},
      {std::string(300, 'n'), "File name too long"},  // a filesystem_error, exit 1, before
  };
  for (const Case& c : cases) {
    CAPTURE(c.path.substr(0, 80));
    auto r = run_mgpu({"viz", c.path, "--screenshot", png});
    CHECK(r.code == 2);
    CHECK(mgpu::testing::count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(c.says));
    CHECK_FALSE(fs::exists(png));
  }
  fs::remove_all(dir);
}

TEST_CASE("a percentage beyond any fraction is not printed as inf%", "[viz][hostile]") {
  CHECK(mgpu::viz::format_percent(0.273) == "27.3%");
  CHECK(mgpu::viz::format_percent(1e308) == "(out of range)");
  CHECK(mgpu::viz::format_percent(std::nan("")) == "(out of range)");
}

namespace {
// A PNG's height, from its IHDR chunk (bytes 20-23, big-endian).
uint32_t png_height(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char bytes[24] = {};
  in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  return uint32_t{bytes[20]} << 24 | uint32_t{bytes[21]} << 16 | uint32_t{bytes[22]} << 8 |
         uint32_t{bytes[23]};
}
}  // namespace

// A trace of thousands of ranks made an 8192-pixel picture, because the default height followed
// the content (#51); the default is bounded now, and --height still asks for more.
TEST_CASE("a screenshot's default height is bounded, whatever the rank count", "[viz][hostile]") {
  const fs::path dir = fs::temp_directory_path() / ("mgpu_tall_viz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "ranks.json").string(), png = (dir / "out.png").string();
  {
    std::ofstream out(path);
    out << header(1024);
    for (int rank = 0; rank < 1024; ++rank)
      out << (rank ? "," : "") << event(rank, "0", "5") << ","
          << R"({"ph": "X", "name": "all_reduce", "cat": "comm", "pid": )" << rank
          << R"(, "tid": 1, "ts": 5, "dur": 2})";
    out << "]}";
  }
  auto r = run_mgpu({"viz", path, "--screenshot", png});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(png_height(png) <= 4800);
  CHECK(png_height(png) >= 1000);  // still as tall as a few hundred lanes
  r = run_mgpu({"viz", path, "--screenshot", png, "--height", "6000"});
  REQUIRE(r.code == 0);
  CHECK(png_height(png) == 6000);
  fs::remove_all(dir);
}

}  // namespace test_hostile_viz

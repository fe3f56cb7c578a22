// Hostile traces in the dashboard (issue #18, item 1): `mgpu viz` refuses absurd timestamps and
// rank counts with exit 2 and draws nothing, instead of looping, allocating gigabytes or aborting.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "unit/mgpu_cli.h"

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

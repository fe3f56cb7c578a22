// The modeled clock against this host's wall clock (a benchmark, not a test): `mgpu calibrate
// --device cpu` measures the host into a profile, then single_device, ddp and pipeline run at 1-2
// ranks once with --clock wall and once with --clock modeled --profile that file; the ratio
// modeled / wall of each run's traced span (first event start to last event end, all ranks) says
// how far the model is from this machine (goal: within 20%).
//   bench_clock_vs_wall [steps=6]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace/chrome_trace.h"
#include "lessons/calibrate_cpu.h"
#include "lessons/cli.h"

using namespace mgpu;

namespace {

double traced_span(const std::filesystem::path& file) {
  const trace::Trace t = trace::read_chrome_trace(file);
  double begin = 1e30, end = 0;
  for (const trace::Event& e : t.events) {
    begin = std::min(begin, e.start);
    end = std::max(end, e.end());
  }
  return end > begin ? end - begin : 0;
}

double run_span(const std::vector<std::string>& lesson, const std::string& clock,
                const std::string& profile, const std::filesystem::path& trace_file) {
  std::vector<std::string> args = lesson;
  args.insert(args.end(), {"--clock", clock, "--trace", trace_file.string()});
  if (!profile.empty()) args.insert(args.end(), {"--profile", profile});
  std::ostringstream out, err;
  if (lessons::mgpu_main(args, out, err) != 0) {
    std::fprintf(stderr, "bench_clock_vs_wall: %s failed: %s\n", lesson[1].c_str(),
                 err.str().c_str());
    std::exit(1);
  }
  return traced_span(trace_file);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string steps = argc > 1 ? argv[1] : "6";
  const auto dir = std::filesystem::temp_directory_path() / "mgpu_bench_clock";
  std::filesystem::create_directories(dir);
  const std::filesystem::path profile = dir / "calibrated-cpu.json";
  {
    std::ostringstream log;
    const std::vector<std::string> calibrate = {"calibrate", "--device", "cpu", "--out",
                                                profile.string()};
    std::ostringstream err;
    if (lessons::mgpu_main(calibrate, log, err) != 0) {
      std::fprintf(stderr, "calibrate failed: %s\n", err.str().c_str());
      return 1;
    }
    std::printf("%s\n", log.str().c_str());
  }
  const std::vector<std::vector<std::string>> runs = {
      {"run", "single_device", "--ranks", "1", "--steps", steps},
      {"run", "ddp", "--ranks", "2", "--steps", steps},
      {"run", "pipeline", "--ranks", "2", "--steps", steps},
  };
  std::printf("%-40s %12s %12s %14s\n", "lesson", "wall (ms)", "modeled (ms)", "modeled/wall");
  for (const auto& lesson : runs) {
    const double wall = run_span(lesson, "wall", "", dir / "wall.json");
    const double modeled = run_span(lesson, "modeled", profile.string(), dir / "modeled.json");
    std::string name;
    for (size_t i = 1; i < lesson.size(); ++i)
      name += lesson[i] + (i + 1 < lesson.size() ? " " : "");
    std::printf("%-40s %12.2f %12.2f %14.2f\n", name.c_str(), 1e3 * wall, 1e3 * modeled,
                modeled / wall);
  }
  return 0;
}

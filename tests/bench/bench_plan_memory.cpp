// Peak memory of `mgpu plan --model gpt3-175b --gpus 1024 --max-simulated N` for growing N: the
// planner keeps a summary of each simulated layout (its lanes' spans), never its trace, so the
// peak does not grow with N and stays under 1 GiB (#51: with the trace kept it was 3.3 GB at
// N = 30, and a larger N died of bad_alloc). Each N runs in a child process, whose own peak
// resident set the kernel reports (wait4's rusage); run by hand:
//   bench_plan_memory [N ...]      (default: 1 8 30)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "lessons/plan.h"

namespace {

struct ChildRun {
  int status = -1;
  double peak_mib = 0, wall_seconds = 0;
};

ChildRun plan_in_child(int max_simulated) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    std::ostringstream out, err;  // the plan's text is not the point here
    const int code = mgpu::lessons::cmd_plan({"--model", "gpt3-175b", "--gpus", "1024",
                                              "--max-simulated", std::to_string(max_simulated)},
                                             out, err);
    if (code != 0) std::fputs(err.str().c_str(), stderr);
    std::_Exit(code);
  }
  ChildRun run;
  rusage usage{};
  if (pid < 0 || wait4(pid, &run.status, 0, &usage) != pid) return run;
  run.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
  run.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {1, 8, 30};
  std::printf("mgpu plan --model gpt3-175b --gpus 1024 --max-simulated N (one child each)\n");
  std::printf("%8s %12s %10s %16s\n", "N", "peak MiB", "wall s", "peak / 1 GiB");
  for (int n : counts) {
    const ChildRun run = plan_in_child(n);
    if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0) {
      std::printf("%8d failed (status %d)\n", n, run.status);
      return 1;
    }
    std::printf("%8d %12.1f %10.1f %15.2fx\n", n, run.peak_mib, run.wall_seconds,
                run.peak_mib / 1024.0);
  }
  return 0;
}

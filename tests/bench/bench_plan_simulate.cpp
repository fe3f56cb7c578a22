// How long the planner's engine takes to simulate one layout of GPT-3 175B on 1024 GPUs (what
// `mgpu plan --model gpt3-175b --gpus 1024` repeats for every candidate), and what it predicts.
// Wall seconds per plan::simulate() call, one line per layout; run by hand.
//   bench_plan_simulate [PROFILE]      (default 2x8xH100-IB: 8 GPUs per node, InfiniBand between)
#include <sys/resource.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "core/plan/simulate.h"
#include "exercises/exercises.h"

// CPU seconds of every thread of this process so far (the host is shared: wall time varies).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  mgpu::HardwareProfile profile;
  try {
    profile = mgpu::HardwareProfile::load(argc > 1 ? argv[1] : "2x8xH100-IB");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  mgpu::plan::Workload work;
  work.seams = mgpu::reference::seams().hybrid();
  work.model = {.vocab = 50257, .seq_len = 2048, .layers = 96, .dim = 12288, .heads = 96};
  struct Case {
    int dp, tp, pp, microbatches;
    const char* schedule;
  };
  // global batch 1536 sequences, micro-batch 1
  const Case cases[] = {{8, 8, 16, 192, "1f1b"},
                        {16, 8, 8, 96, "1f1b"},
                        {4, 8, 32, 384, "1f1b"},
                        {8, 16, 8, 192, "1f1b"},
                        {32, 4, 8, 48, "gpipe"}};
  std::printf("%-28s %8s %8s %10s %8s %8s %10s %12s %8s\n", "layout (gpt3-175b, 1024 GPUs)",
              "wall s", "cpu s", "step s", "MFU", "bubble", "exposed s", "peak GiB", "stage");
  double total = 0, total_cpu = 0;
  for (const Case& c : cases) {
    mgpu::plan::Layout l;
    l.dp = c.dp, l.tp = c.tp, l.pp = c.pp, l.microbatches = c.microbatches;
    l.schedule = c.schedule;
    char name[64];
    std::snprintf(name, sizeof name, "dp%d tp%d pp%d M%d %s", c.dp, c.tp, c.pp, c.microbatches,
                  c.schedule);
    try {
      const double cpu_before = cpu_seconds();
      const mgpu::plan::Prediction p = mgpu::plan::simulate(work, l, profile);
      const double cpu = cpu_seconds() - cpu_before;
      total += p.wall_seconds;
      total_cpu += cpu;
      std::printf("%-28s %8.2f %8.2f %10.3f %7.1f%% %7.1f%% %10.3f %12.2f %8d\n", name,
                  p.wall_seconds, cpu, p.step_seconds, 100 * p.mfu, 100 * p.bubble_fraction,
                  p.exposed_comm_seconds, static_cast<double>(p.memory_peak_total) / (1 << 30),
                  p.worst_stage);
    } catch (const std::exception& e) {
      std::printf("%-28s refused: %s\n", name, e.what());
    }
  }
  std::printf("total wall %.2f s, cpu %.2f s for %zu layouts\n", total, total_cpu,
              std::size(cases));
  return 0;
}

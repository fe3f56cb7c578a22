// DDP scaling: step time and tokens/s for N = 1..8 ranks, weak scaling (a fixed batch per rank,
// so the global batch grows with N). Modeled on a hardware profile (what N real GPUs would do)
// and wall-clock on this CPU (the rank threads share its cores, so wall time cannot scale).
//   bench_ddp [profile] [batch_per_rank] [dim]     e.g. bench_ddp 2xRTX4090-PCIe 8 64
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/trace/analysis.h"
#include "lessons/ddp.h"

using namespace mgpu;
using namespace mgpu::lessons;

int main(int argc, char** argv) {
  std::string profile = argc > 1 ? argv[1] : "8xH100-NVLink";
  int per_rank = argc > 2 ? std::atoi(argv[2]) : 8;
  int dim = argc > 3 ? std::atoi(argv[3]) : 64;
  const int steps = 3;
  std::printf("DDP weak scaling on %s: batch %d per rank, seq 32, dim %d, 2 layers, %d steps\n",
              profile.c_str(), per_rank, dim, steps);
  std::printf("%5s %7s | %12s %14s %8s %8s | %12s %12s\n", "ranks", "batch", "modeled step",
              "tokens/s", "speedup", "overlap", "wall step", "wall tok/s");
  double base_tps = 0;
  for (int n = 1; n <= 8; ++n) {
    CommonOptions c;
    c.ranks = n;
    c.steps = steps;
    c.dim = dim;
    c.profile = profile;
    c.quiet = true;
    DataParallelOptions d;
    d.batch_per_rank = per_rank;
    std::ostringstream out;
    DataParallelResult r = train_data_parallel(c, d, out);
    double tokens = double(r.global_batch) * c.seq;
    double tps = tokens / r.step_seconds;
    if (n == 1) base_tps = tps;
    trace::TraceSummary s = trace::analyze(r.trace, steps - 1);
    double wall_step = r.wall_seconds / steps;
    std::printf("%5d %7d | %9.3f us %14.0f %7.2fx %7.1f%% | %9.3f ms %12.0f\n", n, r.global_batch,
                r.step_seconds * 1e6, tps, tps / base_tps, 100 * s.ranks[0].overlap_fraction,
                wall_step * 1e3, tokens / wall_step);
  }
  std::printf("speedup = modeled tokens/s over 1 rank (ideal: N); wall times share this CPU.\n");
  return 0;
}

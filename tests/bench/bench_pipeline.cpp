// Pipeline step time vs micro-batches, per schedule, on the modeled clock of a hardware profile.
// More micro-batches shrink the bubble ((P-1)/(M+P-1)) but each micro-batch is smaller, so
// kernels get less efficient (launch overhead dominates tiny GEMMs): the table shows both effects.
//   bench_pipeline [profile]        (default 8xH100-NVLink)
#include <cstdio>
#include <sstream>
#include <string>

#include "core/trace/analysis.h"
#include "lessons/pipeline.h"

using namespace mgpu;
using namespace mgpu::lessons;

int main(int argc, char** argv) {
  const int P = 4, batch = 32;
  CommonOptions c;
  c.ranks = P;
  c.layers = 8;
  c.dim = 64;
  c.heads = 4;
  c.seq = 32;
  c.batch = batch;
  c.steps = 2;
  c.quiet = true;
  c.profile = argc > 1 ? argv[1] : "8xH100-NVLink";
  std::printf("pipeline step time (modeled on %s), P = %d stages, batch %d, %d layers, dim %d\n",
              c.profile.c_str(), P, batch, c.layers, c.dim);
  std::printf("%-16s %4s %14s %16s %16s\n", "schedule", "M", "step time", "bubble measured",
              "bubble theory");
  struct Run {
    const char* schedule;
    int virtual_stages;
  };
  for (Run run : {Run{"gpipe", 1}, Run{"1f1b", 1}, Run{"interleaved", 2}}) {
    for (int M : {4, 8, 16, 32}) {
      std::ostringstream sink;
      PipelineResult r = train_pipeline(c, {run.schedule, P, M, run.virtual_stages}, sink);
      const trace::TraceSummary s = trace::analyze(r.trace, c.steps - 1);
      std::printf("%-16s %4d %11.1f us %15.1f%% %15.1f%%\n",
                  (std::string(run.schedule) + (run.virtual_stages > 1 ? " V=2" : "")).c_str(), M,
                  1e6 * (s.window.end - s.window.begin), 100 * s.mean_bubble_fraction,
                  100 * r.theory_bubble);
    }
  }
  return 0;
}

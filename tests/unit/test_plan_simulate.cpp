// The planner's engine: simulating one rank per pipeline stage (tp/dp peers symmetric, their
// collectives costed on the links their groups really use) must agree with a full phantom run of
// every rank, in step time (3%) and in the largest per-rank allocator peak (2%), on a two-node
// profile, for groups that stay inside a node and groups that cross nodes.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "core/comm/symmetric.h"
#include "core/plan/simulate.h"

using mgpu::plan::Layout;
using mgpu::plan::Prediction;
using mgpu::plan::Simulation;
using mgpu::plan::Workload;

namespace {

Workload small_gpt() {
  Workload w;
  w.model.vocab = 1024;
  w.model.seq_len = 128;
  w.model.layers = 8;
  w.model.dim = 256;
  w.model.heads = 16;
  return w;
}

Layout layout(int dp, int tp, int pp, int microbatches, const char* schedule,
              const char* precision = "fp32") {
  Layout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.microbatch_size = 2;
  l.microbatches = microbatches;
  l.schedule = schedule;
  l.precision = precision;
  return l;
}

std::string describe(const Layout& l) {
  std::ostringstream s;
  s << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp << " M " << l.microbatches << " "
    << l.schedule << " " << l.precision << " recompute " << l.recompute;
  return s.str();
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

}  // namespace

TEST_CASE("the representative simulation agrees with a full phantom run", "[plan][simulate]") {
  const mgpu::HardwareProfile profile = mgpu::HardwareProfile::load("2x8xH100-IB");
  const Workload work = small_gpt();
  const std::vector<Layout> layouts = {
      layout(2, 8, 2, 4, "1f1b"),   // tp inside a node, dp across nodes
      layout(1, 16, 2, 4, "1f1b"),  // tp across two nodes
      layout(4, 2, 2, 4, "gpipe"),  // dp inside a node, stages on two nodes
      layout(2, 4, 4, 8, "1f1b"),   // four stages, dp across nodes
      layout(8, 1, 4, 4, "gpipe"),  // pure dp x pp, dp filling a node
      layout(2, 2, 8, 8, "1f1b", "bf16"),
  };
  for (const Layout& l : layouts) {
    INFO(describe(l));
    const Prediction rep = mgpu::plan::simulate(work, l, profile, Simulation::representative);
    const Prediction full = mgpu::plan::simulate(work, l, profile, Simulation::full);
    INFO("step " << rep.step_seconds << " s vs full " << full.step_seconds << " s; memory "
                 << rep.memory_peak_total << " vs " << full.memory_peak_total);
    CHECK(rep.step_seconds > 0);
    CHECK(relative(rep.step_seconds, full.step_seconds) <= 0.03);
    CHECK(relative(static_cast<double>(rep.memory_peak_total),
                   static_cast<double>(full.memory_peak_total)) <= 0.02);
    CHECK(rep.worst_stage == full.worst_stage);
    CHECK(rep.tp_crosses_nodes == (l.tp > 8));
  }
}

TEST_CASE("a layout the model cannot run is refused in one line", "[plan][simulate]") {
  const mgpu::HardwareProfile profile = mgpu::HardwareProfile::load("2x8xH100-IB");
  const Workload work = small_gpt();
  Layout bad = layout(1, 3, 2, 4, "1f1b");  // 3 does not divide the 16 heads
  CHECK_THROWS_AS(mgpu::plan::simulate(work, bad, profile), std::invalid_argument);
  bad = layout(2, 2, 3, 4, "1f1b");  // 3 stages do not divide 8 layers
  CHECK_THROWS_AS(mgpu::plan::simulate(work, bad, profile), std::invalid_argument);
  bad = layout(2, 2, 2, 4, "interleaved");
  CHECK_THROWS_AS(mgpu::plan::simulate(work, bad, profile), std::invalid_argument);
  bad = layout(2, 2, 2, 4, "1f1b");
  bad.zero = 1;
  CHECK_THROWS_WITH(mgpu::plan::simulate(work, bad, profile),
                    Catch::Contains("not supported by the hybrid layout yet"));
  bad = layout(2, 2, 2, 4, "1f1b");
  bad.cp = 2;
  CHECK_THROWS_WITH(mgpu::plan::simulate(work, bad, profile),
                    Catch::Contains("not supported by the hybrid layout yet"));
  bad = layout(4, 4, 4, 4, "1f1b");  // 64 ranks is fine for the representative run only
  bad.dp = 8;
  CHECK_THROWS_AS(mgpu::plan::simulate(work, bad, profile, Simulation::full),
                  std::invalid_argument);
}

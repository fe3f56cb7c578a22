// The rank context: kernels advance the modeled clock by their roofline cost; compute scopes
// become one trace event; profiles load from presets and JSON with clear errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/runtime/context.h"
#include "core/runtime/host_memory.h"
#include "core/world/world.h"

namespace test_runtime {

using namespace mgpu;

TEST_CASE("kernels cost launch + max(flops/peak, bytes/bandwidth) on the modeled clock",
          "[runtime]") {
  HardwareProfile p = HardwareProfile::ideal(0);
  p.peak_flops = 1e12;
  p.mem_bandwidth = 1e11;
  p.launch_overhead = 1e-6;
  RankContext ctx(0, 1, Device::cpu(), p, ClockKind::modeled);
  ScopedRank g(ctx);
  { KernelScope k("math_bound", 2e9, 1e3); }  // 2 ms of math
  CHECK(ctx.clock.compute_now() == Approx(1e-6 + 2e-3).epsilon(1e-12));
  { KernelScope k("memory_bound", 1e3, 1e9); }  // 10 ms of memory traffic
  CHECK(ctx.clock.compute_now() == Approx(2e-6 + 12e-3).epsilon(1e-12));
  REQUIRE(ctx.tracer.events().size() == 2);  // no scope open: each kernel is its own event
  CHECK(ctx.tracer.events()[1].name == "memory_bound");
  CHECK(ctx.tracer.events()[1].start == ctx.tracer.events()[0].end());
}

TEST_CASE("a compute scope becomes one event holding its kernels' work", "[runtime]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(1e-3), ClockKind::modeled);
  ScopedRank g(ctx);
  {
    ComputeScope s({.name = "fwd", .cat = trace::cat::forward, .microbatch = 3, .layer = 1});
    KernelScope a("a", 10, 100);
    KernelScope b("b", 20, 200);
  }
  REQUIRE(ctx.tracer.events().size() == 1);
  const trace::Event& e = ctx.tracer.events()[0];
  CHECK(e.name == "fwd");
  CHECK(e.microbatch == 3);
  CHECK(e.layer == 1);
  CHECK(e.dur == Approx(2e-3));
  CHECK(e.flops == 30);
  CHECK(e.bytes == 300);
  {
    StepScope step(0);
    KernelScope k("c", 0, 0);
  }
  CHECK(ctx.tracer.events().back().lane == trace::Lane::step);
  CHECK(ctx.tracer.events().back().dur == Approx(1e-3));
}

TEST_CASE("wall clock scopes measure real time and never go backwards", "[runtime]") {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(1.0), ClockKind::wall);
  ScopedRank g(ctx);
  { KernelScope k("k", 0, 0); }  // a 1 s modeled kernel must not cost 1 s of wall time
  CHECK(ctx.clock.compute_now() < 0.5);
  CHECK(ctx.tracer.events().at(0).dur >= 0);
}

TEST_CASE("profiles: presets, JSON round trip, links, clear errors", "[runtime][profile]") {
  for (auto& name : HardwareProfile::preset_names()) {
    HardwareProfile p = HardwareProfile::load(name);
    CHECK(p.name == name);
    HardwareProfile q = HardwareProfile::from_json(p.to_json());
    CHECK(q.peak_flops == Approx(p.peak_flops));
    CHECK(q.intra_node.bandwidth == Approx(p.intra_node.bandwidth));
    CHECK(q.memory_capacity == p.memory_capacity);
  }
  HardwareProfile two_nodes = HardwareProfile::load("2x8xH100-IB");
  CHECK(two_nodes.link(0, 7).name == two_nodes.intra_node.name);
  CHECK(two_nodes.link(7, 8).name == two_nodes.inter_node.name);
  // 50 GB over the 50 GB/s InfiniBand link at its achieved bus bandwidth (90% of the datasheet).
  CHECK(two_nodes.inter_node.efficiency == 0.9);
  CHECK(two_nodes.transfer_time(0, 8, 50e9) == Approx(1.0 / 0.9 + 5e-6));

  // DGX nodes: 8 GPUs on NVSwitch, InfiniBand between, the published per-GPU peaks per dtype.
  for (const char* dgx : {"DGX-H100", "DGX-A100"}) {
    HardwareProfile p = HardwareProfile::load(dgx);
    CHECK(p.ranks_per_node == 8);
    CHECK(p.memory_capacity == 80 * (int64_t{1} << 30));
    CHECK(p.link(0, 7).name.find("NVLink") == 0);
    CHECK(p.link(1016, 1023).name.find("NVLink") == 0);  // node 127 of a 1024-GPU run
    CHECK(p.link(7, 8).name.find("InfiniBand") == 0);
    CHECK(p.peak_for(DType::bf16) == Approx(2 * p.peak_flops).epsilon(0.01));  // TF32 is half
  }
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  CHECK(h100.peak_for(DType::bf16) == Approx(989.4e12));
  CHECK(h100.intra_node.bandwidth == Approx(450e9));
  CHECK(h100.inter_node.bandwidth == Approx(50e9));
  const HardwareProfile a100 = HardwareProfile::load("DGX-A100");
  CHECK(a100.peak_for(DType::f16) == Approx(312e12));
  CHECK(a100.mem_bandwidth == Approx(2.039e12));
  CHECK(a100.inter_node.bandwidth == Approx(25e9));

  CHECK_THROWS_WITH(HardwareProfile::load("9xH100"), Catch::Contains("unknown profile '9xH100'") &&
                                                         Catch::Contains("8xH100-NVLink"));
  auto dir = std::filesystem::temp_directory_path();
  auto bad = dir / "mgpu_bad_profile.json";
  std::ofstream(bad) << "{ \"peak_TFLOPs\": 1 ";
  CHECK_THROWS_WITH(HardwareProfile::load(bad.string()), Catch::Contains("not valid JSON"));
  std::ofstream(bad)
      << R"({"peak_TFLOPs": 1, "mem_bandwidth_GBps": -5, "intra_node": {"bandwidth_GBps": 1, "latency_us": 1}})";
  CHECK_THROWS_WITH(HardwareProfile::load(bad.string()),
                    Catch::Contains("mem_bandwidth_GBps must be >= 0.001"));
  std::ofstream(bad) << R"({"peak_TFLOPs": 1})";
  CHECK_THROWS_WITH(HardwareProfile::load(bad.string()), Catch::Contains("needs peak_TFLOPs"));
  std::filesystem::remove(bad);
}

TEST_CASE("cpu ranks never get more capacity than their share of the host's memory",
          "[runtime][hostile]") {
  const int64_t GiB = int64_t{1} << 30;
  CHECK(mgpu::cpu_rank_capacity(80 * GiB, 1, 24 * GiB) == 18 * GiB);
  CHECK(mgpu::cpu_rank_capacity(80 * GiB, 4, 24 * GiB) == 18 * GiB / 4);
  CHECK(mgpu::cpu_rank_capacity(2 * GiB, 4, 24 * GiB) == 2 * GiB);  // --capacity below the share
  CHECK(mgpu::cpu_rank_capacity(0, 2, 8 * GiB) == 3 * GiB);         // 0 = unlimited profile
  CHECK(mgpu::cpu_rank_capacity(80 * GiB, 1, -1) == 80 * GiB);      // unknown host
  const int64_t available = mgpu::host_available_bytes();
  CHECK(available != 0);  // this Linux host reports MemAvailable
}

#ifdef __linux__
// OpenBLAS starts its worker pool when the program loads it, and an idle worker spins for its
// first ~0.1 s: beside two rank threads on a 2-core machine that is a third busy thread. Making
// a World stops the pool, so the ranks are the only threads that run.
TEST_CASE("a World leaves no BLAS worker threads spinning beside the ranks", "[runtime]") {
  auto threads_in_process = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return -1;
  };
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
  WARN("not checked under ThreadSanitizer, which runs a thread of its own in the process");
  return;
#endif
#endif
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = 2;
  o.backend = "local";
  World world(o);
  CHECK(threads_in_process() == 1);  // this test's own thread; no pool
  int during = 0;
  world.run([&](RankContext& ctx) {
    ctx.comm->barrier();
    if (ctx.rank == 0) during = threads_in_process();
    ctx.comm->barrier();
  });
  CHECK(during == 3);  // the caller and the two ranks
}
#endif

}  // namespace test_runtime

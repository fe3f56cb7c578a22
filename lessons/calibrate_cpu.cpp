// `mgpu calibrate --device cpu`: measures this host as the modeled clock sees a "virtual GPU" and
// writes a HardwareProfile, so `--clock modeled --profile FILE` can be checked against `--clock
// wall` on the same machine (tests/bench/bench_clock_vs_wall.cpp):
//   GEMM throughput by shape   ops::matmul (OpenBLAS) on square and Transformer-like shapes; the
//                              best is the profile's peak, the shapes show how far small ones fall;
//   memory bandwidth           a 64 MiB tensor copy (read + write bytes per second);
//   launch overhead            a 16-element add: what every op costs before its work;
//   the local backend          2 rank threads, ping-pong: 8 B messages give the latency, 16 MiB
//                              ones the bandwidth.
#include <algorithm>
#include <chrono>
#include <ostream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/world/world.h"
#include "lessons/calibrate_cpu.h"

namespace mgpu::lessons {

namespace {

// Seconds per call of fn: one warm-up call, then the best of `repeats` timed batches of `calls`
// (the best, not the mean: a shared host's interruptions only ever add time).
template <class Fn>
double seconds_per_call(Fn&& fn, int calls, int repeats = 3) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  return best;
}

double gemm_flops_per_s(int64_t m, int64_t n, int64_t k) {
  Tensor a = Tensor::zeros({m, k}, MemCategory::workspace);
  Tensor b = Tensor::zeros({k, n}, MemCategory::workspace);
  Tensor c = Tensor::zeros({m, n}, MemCategory::workspace);
  const double flops = 2.0 * m * n * k;
  const int calls = std::max(1, static_cast<int>(2e9 / flops));
  return flops / seconds_per_call([&] { ops::matmul(c, a, b); }, calls);
}

// Seconds for one message of `bytes` between two rank threads (half a round trip).
double message_seconds(int64_t bytes, int round_trips) {
  WorldOptions options;
  options.ranks = 2;
  options.clock = ClockKind::wall;
  options.backend = "local";
  options.trace = false;
  World world(options);
  double seconds = 0;
  world.run([&](RankContext& ctx) {
    Tensor t = Tensor::zeros({std::max<int64_t>(1, bytes / 4)}, MemCategory::comm_buffers);
    const int peer = 1 - ctx.rank;
    auto ping_pong = [&] {
      if (ctx.rank == 0) {
        ctx.comm->send(t, peer);
        ctx.comm->recv(t, peer);
      } else {
        ctx.comm->recv(t, peer);
        ctx.comm->send(t, peer);
      }
    };
    const double s = seconds_per_call(ping_pong, round_trips) / 2;
    if (ctx.rank == 0) seconds = s;
  });
  return seconds;
}

}  // namespace

CpuCalibration calibrate_cpu(std::ostream& out) {
  CpuCalibration cal;
  fmt::print(out, "GEMM throughput by shape (ops::matmul, fp32, OpenBLAS):\n");
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{64, 64, 64},    {256, 256, 256},  {1024, 1024, 1024}, {512, 2304, 768},
                          {512, 768, 768}, {512, 3072, 768}, {2048, 2048, 2048}};
  for (const Shape& s : shapes) {
    const double rate = gemm_flops_per_s(s.m, s.n, s.k);
    cal.gemm.push_back({s.m, s.n, s.k, rate});
    fmt::print(out, "  [{:>4} x {:>4}] @ [{:>4} x {:>4}]  {:8.1f} GFLOP/s\n", s.m, s.k, s.k, s.n,
               rate / 1e9);
  }
  double best = 0;
  for (const auto& g : cal.gemm) best = std::max(best, g.flops_per_s);

  Tensor src = Tensor::zeros({int64_t{16} << 20}, MemCategory::workspace);  // 64 MiB
  Tensor dst = Tensor::zeros(src.shape(), MemCategory::workspace);
  const double copy = seconds_per_call([&] { dst.copy_from(src); }, 4);
  cal.mem_bandwidth = 2.0 * static_cast<double>(src.bytes()) / copy;
  Tensor tiny = Tensor::zeros({16}, MemCategory::workspace);
  cal.launch_overhead = seconds_per_call([&] { ops::add(tiny, tiny, tiny); }, 10000);
  cal.latency = message_seconds(8, 2000);
  const int64_t big = int64_t{16} << 20;
  cal.link_bandwidth = static_cast<double>(big) / (message_seconds(big, 8) - cal.latency);
  fmt::print(out,
             "memory bandwidth (64 MiB copy)        {:8.1f} GB/s (read + write)\n"
             "launch overhead (16-element add)      {:8.2f} us\n"
             "local backend, 2 rank threads         {:8.2f} us latency, {:.1f} GB/s\n",
             cal.mem_bandwidth / 1e9, cal.launch_overhead * 1e6, cal.latency * 1e6,
             cal.link_bandwidth / 1e9);

  HardwareProfile& p = cal.profile;
  p.name = "calibrated-cpu";
  p.description = "this host, measured by mgpu calibrate --device cpu";
  p.peak_flops = best;
  p.peak_label = "fp32 GEMM, measured (OpenBLAS)";
  p.mem_bandwidth = cal.mem_bandwidth;
  p.launch_overhead = cal.launch_overhead;
  p.memory_capacity = 0;
  p.ranks_per_node = 64;
  p.intra_node = {"local backend (rank threads), measured", cal.link_bandwidth, cal.latency};
  p.inter_node = p.intra_node;
  return cal;
}

}  // namespace mgpu::lessons

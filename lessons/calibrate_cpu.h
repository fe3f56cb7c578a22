// `mgpu calibrate --device cpu`: this host measured as the modeled clock's "virtual GPU".
#pragma once
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "core/runtime/profile.h"

namespace mgpu::lessons {

struct CpuCalibration {
  struct Gemm {
    int64_t m, n, k;
    double flops_per_s;
  };
  std::vector<Gemm> gemm;      // by shape
  double mem_bandwidth = 0;    // bytes/s, read + write of a large copy
  double launch_overhead = 0;  // seconds of a 16-element op
  double latency = 0;          // seconds per 8 B message between two rank threads
  double link_bandwidth = 0;   // bytes/s of 16 MiB messages between two rank threads
  HardwareProfile profile;     // the figures above as a profile (peak = the best GEMM rate)
};

// Measures (a few seconds) and prints each figure to `out` as it is measured.
CpuCalibration calibrate_cpu(std::ostream& out);

}  // namespace mgpu::lessons

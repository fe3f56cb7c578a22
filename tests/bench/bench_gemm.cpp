// GEMM throughput: core's ops::matmul (dispatch + KernelScope + OpenBLAS) against calling
// cblas_sgemm directly on the same shapes, one BLAS thread each (as a rank runs it).
// Prints GFLOP/s of both and their ratio; the ratio should be ~1.0 (dispatch is free).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/ops/cpu/kernels.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"

using namespace mgpu;

namespace {
// Best of `reps` timings of fn(), in seconds.
template <class Fn>
double best_time(Fn fn, int reps = 3) {
  fn();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int main() {
  cpu::use_one_blas_thread();
  current_rank().tracer.enabled = false;
  std::printf("%6s %6s %6s  %12s  %12s  %6s\n", "M", "N", "K", "core GF/s", "cblas GF/s", "ratio");
  for (int64_t size : {256, 512, 768, 1024}) {
    const int64_t m = size, n = size, k = size;
    Tensor a = Tensor::empty({m, k}, MemCategory::workspace);
    Tensor b = Tensor::empty({n, k}, MemCategory::workspace);
    Tensor c = Tensor::empty({m, n}, MemCategory::workspace);
    a.fill(0.5f);
    b.fill(0.25f);
    // the Linear layer's shape: C = A @ B^T
    // Alternate the two in rounds and keep each one's best: the machine may be shared, and
    // alternating exposes both to the same background load.
    double t_core = 1e30, t_blas = 1e30;
    for (int round = 0; round < 5; round++) {
      t_core = std::min(t_core, best_time([&] { ops::matmul(c, a, b, false, true); }, 1));
      t_blas = std::min(t_blas, best_time(
                                    [&] {
                                      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m),
                                                  int(n), int(k), 1.0f, a.f32(), int(k), b.f32(),
                                                  int(k), 0.0f, c.f32(), int(n));
                                    },
                                    1));
    }
    const double flops = 2.0 * double(m) * double(n) * double(k);
    std::printf("%6lld %6lld %6lld  %12.1f  %12.1f  %6.3f\n", (long long)m, (long long)n,
                (long long)k, flops / t_core / 1e9, flops / t_blas / 1e9, t_blas / t_core);
  }
  return 0;
}

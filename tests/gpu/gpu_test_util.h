// Helpers for the GPU tests: a CUDA rank to run under, host<->device tensors, and a comparison
// with a stated tolerance. Every TEST_CASE starts with MGPU_REQUIRE_GPU() so that, even when run
// through another main, it WARNs "no CUDA GPU: skipped" and returns instead of failing.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/ops/cuda_module.h"
#include "core/runtime/context.h"
#include "core/runtime/gpu.h"
#include "core/tensor/tensor.h"

#define MGPU_REQUIRE_GPU()          \
  do {                              \
    if (!mgpu::cuda::install()) {   \
      WARN("no CUDA GPU: skipped"); \
      return;                       \
    }                               \
  } while (0)

// The same, and a build with NCCL (without it: "this build has no NCCL: skipped").
#ifdef MGPU_HAVE_NCCL
#define MGPU_REQUIRE_NCCL() MGPU_REQUIRE_GPU()
#else
#define MGPU_REQUIRE_NCCL()                  \
  do {                                       \
    WARN("this build has no NCCL: skipped"); \
    return;                                  \
  } while (0)
#endif

namespace gpu_test {

using namespace mgpu;

// fp32 tolerance of every op comparison: max |gpu - cpu| <= kRelTol * max(|cpu|) + kAbsTol.
// Both sides compute in fp32; only the order of additions differs (cuBLAS vs OpenBLAS, block
// reductions vs loops, atomics), which costs a few ulps per add.
constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-6;

// A rank on cuda:0 (wall clock, no capacity), installed as current for the scope's lifetime.
struct GpuRank {
  RankContext ctx{0, 1, Device::cuda(0), HardwareProfile::ideal(0), ClockKind::wall};
  ScopedRank scoped{ctx};
  Allocator host{Device::cpu()};

  Tensor cpu(const Shape& shape, const std::vector<float>& values) {
    return Tensor::from(shape, values, MemCategory::workspace, &host);
  }
  Tensor cpu_zeros(const Shape& shape) {
    return Tensor::zeros(shape, MemCategory::workspace, DType::f32, &host);
  }
  Tensor gpu(const Tensor& host_tensor) {
    Tensor t =
        Tensor::empty(host_tensor.shape(), MemCategory::workspace, DType::f32, &ctx.allocator);
    t.copy_from(host_tensor);
    return t;
  }
  // A random host tensor and its GPU copy.
  std::pair<Tensor, Tensor> pair(const Shape& shape, uint64_t seed, float stddev = 1.0f) {
    Tensor h = cpu(shape, randn(shape_numel(shape), seed, stddev));
    return {h, gpu(h)};
  }
  static std::vector<float> randn(int64_t n, uint64_t seed, float stddev) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng);
    return v;
  }
};

// The small GPT the whole-model comparisons run: 2 layers, dim 64, 4 heads, seq 32, vocab 97.
inline GPTConfig small_gpt_config(DType dtype = DType::f32) {
  GPTConfig cfg;
  cfg.vocab = 97;
  cfg.seq_len = 32;
  cfg.layers = 2;
  cfg.dim = 64;
  cfg.heads = 4;
  cfg.seed = 7;
  cfg.dtype = dtype;
  return cfg;
}

// n token ids in [0, vocab), seeded.
inline std::vector<int32_t> random_ids(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

inline void require_close(const Tensor& gpu, const Tensor& cpu, const char* what,
                          double rel = kRelTol) {
  std::vector<float> g = gpu.to_vector(), c = cpu.to_vector();
  REQUIRE(g.size() == c.size());
  double max_ref = 0, max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(c[i])));
    double err = std::fabs(double(g[i]) - double(c[i]));
    if (!(err <= max_err)) {  // also catches NaN
      max_err = std::isnan(err) ? INFINITY : err;
      worst = i;
    }
  }
  INFO(what << ": max |gpu - cpu| = " << max_err << " at " << worst << " (gpu " << g[worst]
            << ", cpu " << c[worst] << "), max |cpu| = " << max_ref << ", tolerance "
            << rel * max_ref + kAbsTol);
  CHECK(max_err <= rel * max_ref + kAbsTol);
}

// The GPU's result has the CPU's bits, element for element (the first differing one is named).
inline void require_same_bits(const Tensor& gpu, const Tensor& cpu, const char* what) {
  const std::vector<float> g = gpu.to_vector(), c = cpu.to_vector();
  REQUIRE(g.size() == c.size());
  size_t differing = 0, first = g.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &c[i], sizeof(float)) != 0 && differing++ == 0) first = i;
  INFO(what << ": " << differing << " of " << g.size() << " elements differ"
            << (differing ? " (first at " + std::to_string(first) + ": gpu " +
                                std::to_string(g[first]) + ", cpu " + std::to_string(c[first]) + ")"
                          : std::string()));
  CHECK(differing == 0);
}

inline void require_close(float gpu, float cpu, const char* what, double rel = kRelTol) {
  INFO(what << ": gpu " << gpu << ", cpu " << cpu);
  CHECK(std::fabs(double(gpu) - double(cpu)) <= rel * std::fabs(double(cpu)) + kAbsTol);
}

// One forward/backward of the same random batch through a GPT built from `cfg` on the CPU and
// one on cuda:0 (same seed: the same weights, of cfg.dtype): the losses within `loss_rel`, every
// gradient within `grad_rel` of its largest value. The fp32 defaults, 1e-4 and 1e-3: a whole
// network compounds rounding differences.
inline void require_gpt_matches_cpu(const GPTConfig& cfg, int64_t batch, uint64_t seed,
                                    double loss_rel = 1e-4, double grad_rel = 1e-3) {
  const int64_t seq = cfg.seq_len;
  const std::vector<int32_t> tokens = random_ids(size_t(batch * seq), cfg.vocab, seed);
  const std::vector<int32_t> targets = random_ids(size_t(batch * seq), cfg.vocab, seed + 1);

  GPT cpu_model(cfg);  // the default CPU rank of this thread
  const float cpu_loss = cpu_model.forward_backward(tokens, targets, batch, seq);

  GpuRank g;  // from here on, new tensors live on cuda:0
  GPT gpu_model(cfg);
  const float gpu_loss = gpu_model.forward_backward(tokens, targets, batch, seq);
  require_close(gpu_loss, cpu_loss, "loss", loss_rel);
  auto cpu_params = cpu_model.params();
  auto gpu_params = gpu_model.params();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i]->name);
    REQUIRE(gpu_params[i]->data.dtype() == cfg.dtype);
    REQUIRE(gpu_params[i]->data.device().kind == DeviceKind::cuda);
    require_close(gpu_params[i]->data, cpu_params[i]->data, "same initial weights", 0.0);
    require_close(gpu_params[i]->grad, cpu_params[i]->grad, "gradient", grad_rel);
  }
}

}  // namespace gpu_test

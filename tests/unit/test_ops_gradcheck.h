// Finite-difference gradient checking in float, shared by the op and model tests.
//
// Why these tolerances: the kernels run in float (~7 significant digits). A central difference
// (L(x+h) - L(x-h)) / 2h has truncation error O(h^2 * L''') and rounding error about
// |L| * 1e-7 / h. With h = 1e-2 on O(1) inputs both are ~1e-4 relative to the gradient, so we
// require the norm-relative error ||analytic - numeric|| / max(||analytic||, ||numeric||) to be
// below 1e-2: ~100x above the noise, and far below what a wrong backward produces (a missing
// term, wrong sign or wrong index gives errors of order 1). The perturbation actually applied is
// (x+h) - (x-h) as rounded in float, so h's rounding does not bias the estimate.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace gradcheck {

inline std::vector<float> randn(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// n token ids in [0, vocab), seeded.
inline std::vector<int32_t> random_ids(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % uint64_t(vocab));
  return ids;
}

inline void fill_randn(mgpu::Tensor& t, uint64_t seed, float stddev = 1.0f) {
  auto v = randn(static_cast<size_t>(t.numel()), seed, stddev);
  std::copy(v.begin(), v.end(), t.f32());
}

// sum(out * r) in double: a scalar loss whose d/d out is exactly r.
inline double project(const mgpu::Tensor& out, const std::vector<float>& r) {
  const float* o = out.f32();
  double s = 0;
  for (size_t i = 0; i < r.size(); i++) s += double(o[i]) * double(r[i]);
  return s;
}

struct Result {
  double rel_error = 0;     // ||a - n|| / max(||a||, ||n||)
  double numeric_norm = 0;  // ||n||: must be > 0, or the check tested nothing
};

// Numeric gradient of loss() w.r.t. every element of x (x is perturbed in place, then restored)
// compared with `analytic`.
inline Result check(mgpu::Tensor& x, const std::vector<float>& analytic,
                    const std::function<double()>& loss, float h = 1e-2f) {
  float* p = x.f32();
  double diff2 = 0, a2 = 0, n2 = 0;
  for (int64_t i = 0; i < x.numel(); i++) {
    const float saved = p[i];
    const float plus = saved + h, minus = saved - h;
    p[i] = plus;
    const double lp = loss();
    p[i] = minus;
    const double lm = loss();
    p[i] = saved;
    const double numeric = (lp - lm) / (double(plus) - double(minus));
    const double a = analytic[size_t(i)];
    diff2 += (a - numeric) * (a - numeric);
    a2 += a * a;
    n2 += numeric * numeric;
  }
  const double scale = std::max({std::sqrt(a2), std::sqrt(n2), 1e-12});
  return {std::sqrt(diff2) / scale, std::sqrt(n2)};
}

// The tolerance above; and a result within it, on a gradient that is not zero (a check whose
// numeric gradient vanishes would pass any analytic one).
inline constexpr double kTol = 1e-2;
inline void require_close(const Result& r, const std::string& what) {
  INFO(what << ": rel error " << r.rel_error << ", |numeric| " << r.numeric_norm);
  CHECK(r.numeric_norm > 0);
  CHECK(r.rel_error < kTol);
}

// The op tests' tensors: zeros (a workspace), and N(0, stddev) values.
inline mgpu::Tensor ws(const mgpu::Shape& s, mgpu::DType t = mgpu::DType::f32) {
  return mgpu::Tensor::zeros(s, mgpu::MemCategory::workspace, t);
}
inline mgpu::Tensor randt(const mgpu::Shape& s, uint64_t seed, float stddev = 1.0f) {
  mgpu::Tensor t = ws(s);
  fill_randn(t, seed, stddev);
  return t;
}
inline std::vector<float> vec(const mgpu::Tensor& t) {
  return t.to_vector();
}

}  // namespace gradcheck

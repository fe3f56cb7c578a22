// The kernel math that the CPU and the CUDA kernels share (core/ops/math/elementwise.h,
// optimizer.h), checked on the CPU against independent double-precision formulas and at its
// edges (saturation, overflow, the mask, uneven vocabulary splits), and the CPU kernels checked
// to compute exactly these functions' bits: what passes here is the arithmetic a GPU runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cuda/token_groups.h"
#include "core/ops/math/elementwise.h"
#include "core/ops/math/optimizer.h"
#include "core/ops/optimizer_kernels.h"
#include "core/tensor/tensor.h"

namespace test_kernel_math {

using namespace mgpu;

namespace {

std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// The layernorm of a row in double: y = (x - mean) / sqrt(var + eps) * w + b.
std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= double(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= double(x.size());
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); j++) y[j] = (x[j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j];
  return y;
}

double logsumexp_ref(const float* x, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity(), s = 0;
  for (int64_t j = 0; j < n; j++) mx = std::max(mx, double(x[j]));
  for (int64_t j = 0; j < n; j++) s += std::exp(double(x[j]) - mx);
  return mx + std::log(s);
}

// One row's shared-math cross-entropy, as the kernels compose it: (loss, dlogits).
float ce_row(const std::vector<float>& x, int32_t target, float g, std::vector<float>& dx) {
  float mx = x[0], sum = 0.0f;
  for (float v : x) mx = math::larger(mx, v);
  for (float v : x) sum = math::accumulate(sum, math::ce_exp_term(v, mx));
  const float log_sum = logf(sum);
  dx.resize(x.size());
  for (size_t j = 0; j < x.size(); j++)
    dx[j] = math::ce_dlogit(x[j], mx, log_sum, int32_t(j) == target, g);
  return math::ce_row_loss(log_sum, mx, x[size_t(target)]);
}

}  // namespace

TEST_CASE("kernel math: e^x and tanh and GELU", "[kernel_math]") {
  SECTION("vexp is e^x within about an ulp from -87 to 88 and clamps outside and keeps NaN") {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
      const double ref = std::exp(double(x));
      worst = std::max(worst, std::abs(double(math::vexp(x)) - ref) / ref);
    }
    CHECK(worst < 1.5e-7);  // an ulp of a float is 2^-23 = 1.2e-7 relative
    CHECK(math::vexp(0.0f) == 1.0f);
    CHECK(math::vexp(1.0f) == Approx(M_E).epsilon(2e-7));
    // Below -87 the result is e^-87 (tiny but normal), above 88 e^88: never 0, never inf.
    CHECK(math::vexp(-1000.0f) == math::vexp(-87.0f));
    CHECK(math::vexp(-1000.0f) > 0.0f);
    CHECK(std::isnormal(math::vexp(-87.0f)));
    CHECK(math::vexp(1000.0f) == math::vexp(88.0f));
    CHECK(std::isfinite(math::vexp(1000.0f)));
    CHECK(math::vexp(-std::numeric_limits<float>::infinity()) == math::vexp(-87.0f));
    CHECK(std::isnan(math::vexp(std::numeric_limits<float>::quiet_NaN())));
  }
  SECTION("fast_tanh is tanh and saturates to exactly +-1") {
    for (float u = -10.0f; u <= 10.0f; u += 0.01f)
      REQUIRE(std::abs(double(math::fast_tanh(u)) - std::tanh(double(u))) < 3e-7);
    CHECK(math::fast_tanh(0.0f) == 0.0f);
    CHECK(math::fast_tanh(50.0f) == 1.0f);
    CHECK(math::fast_tanh(-50.0f) == -1.0f);
  }
  SECTION("gelu and its backward against the double formula") {
    for (float x = -8.0f; x <= 8.0f; x += 0.003f) {
      INFO("x = " << x);
      REQUIRE(std::abs(math::gelu(x) - gelu_ref(x)) < 3e-7 * std::max(1.0, std::abs(double(x))));
      // d gelu / dx by a central difference of the double formula, times dy.
      const double h = 1e-4, dy = 0.75;
      const double slope = (gelu_ref(double(x) + h) - gelu_ref(double(x) - h)) / (2 * h);
      REQUIRE(std::abs(math::gelu_backward(x, 0.75f) - slope * dy) < 2e-6);
    }
    CHECK(math::gelu(0.0f) == 0.0f);
    CHECK(math::gelu(30.0f) == 30.0f);  // tanh saturated: x itself
    CHECK(math::gelu(-30.0f) == 0.0f);
    CHECK(math::gelu_backward(30.0f, 2.0f) == 2.0f);  // slope 1
    CHECK(math::gelu_backward(-30.0f, 2.0f) == 0.0f);
  }
}

TEST_CASE("kernel math: layernorm", "[kernel_math]") {
  SECTION("layernorm's pieces give the double layernorm and its gradient") {
    const int64_t c = 96;
    auto xf = random_values(size_t(c), 1, 3.0f);
    auto wf = random_values(size_t(c), 2);
    auto bf = random_values(size_t(c), 3);
    auto dyf = random_values(size_t(c), 4);
    // Forward, composed as both kernels compose it.
    float sum = 0.0f, squares = 0.0f;
    for (float x : xf) sum = math::accumulate(sum, x);
    const float mean = math::row_mean(sum, c);
    for (float x : xf) squares = math::accumulate(squares, math::squared_deviation(x, mean));
    const float rstd = math::layernorm_rstd(math::row_mean(squares, c));
    std::vector<double> x(xf.begin(), xf.end()), w(wf.begin(), wf.end()), b(bf.begin(), bf.end());
    const auto y = layernorm_ref(x, w, b);
    for (int64_t j = 0; j < c; j++)
      REQUIRE(math::layernorm_out(xf[j], mean, rstd, wf[j], bf[j]) == Approx(y[j]).margin(2e-6));

    // Backward: dx against the gradient of sum_j dy_j y_j by central differences in double.
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int64_t j = 0; j < c; j++) {
      const float g = math::layernorm_g(wf[j], dyf[j]);
      g_sum = math::accumulate(g_sum, g);
      gx_sum = math::accumulate(gx_sum, g * math::layernorm_xhat(xf[j], mean, rstd));
    }
    const float g_mean = math::row_mean(g_sum, c), gx_mean = math::row_mean(gx_sum, c);
    for (int64_t j = 0; j < c; j++) {
      auto objective = [&](double xj) {
        auto xs = x;
        xs[j] = xj;
        const auto ys = layernorm_ref(xs, w, b);
        double s = 0;
        for (int64_t k = 0; k < c; k++) s += double(dyf[k]) * ys[k];
        return s;
      };
      const double h = 1e-5;
      const double ref = (objective(x[j] + h) - objective(x[j] - h)) / (2 * h);
      const float dx =
          math::layernorm_dx(math::layernorm_g(wf[j], dyf[j]),
                             math::layernorm_xhat(xf[j], mean, rstd), g_mean, gx_mean, rstd);
      REQUIRE(dx == Approx(ref).margin(1e-4));
    }
  }
  SECTION("layernorm of a constant row is the bias (variance 0: rstd = 1/sqrt(eps))") {
    const float rstd = math::layernorm_rstd(0.0f);
    CHECK(rstd == Approx(1.0 / std::sqrt(1e-5)));
    CHECK(math::layernorm_out(4.0f, 4.0f, rstd, 3.0f, 0.5f) == 0.5f);
    CHECK(math::layernorm_xhat(4.0f, 4.0f, rstd) == 0.0f);
  }
}

TEST_CASE("kernel math: softmax and cross-entropy", "[kernel_math]") {
  SECTION("softmax pieces: probabilities of huge logits and the backward") {
    // Logits near 1000 overflow exp() without the max shift; with it they are fine.
    const std::vector<float> x = {1000.0f, 1001.0f, 999.5f, 1000.25f};
    float mx = x[0], sum = 0.0f;
    for (float v : x) mx = math::larger(mx, v);
    for (float v : x) sum = math::accumulate(sum, math::softmax_numerator(v, mx));
    const float inv = math::reciprocal(sum);
    const double lse = logsumexp_ref(x.data(), int64_t(x.size()));
    std::vector<float> y;
    for (float v : x) {
      y.push_back(math::softmax_numerator(v, mx) * inv);
      CHECK(y.back() == Approx(std::exp(double(v) - lse)).epsilon(1e-6));
    }
    // dx = J^T dy with J_jk = y_j (delta_jk - y_k).
    const std::vector<float> dy = {0.3f, -1.2f, 0.7f, 2.0f};
    float dot = 0.0f;
    for (size_t k = 0; k < y.size(); k++) dot = math::accumulate(dot, y[k] * dy[k]);
    for (size_t j = 0; j < y.size(); j++) {
      double ref = 0;
      for (size_t k = 0; k < y.size(); k++)
        ref += double(dy[k]) * double(y[k]) * ((j == k ? 1.0 : 0.0) - double(y[j]));
      CHECK(math::softmax_backward(y[j], dy[j], dot) == Approx(ref).margin(1e-6));
      CHECK(math::softmax_backward_scaled(y[j], dy[j], dot, 0.25f) ==
            Approx(0.25 * ref).margin(1e-6));
    }
    // The larger of two values is picked as std::max picks it.
    CHECK(math::larger(1.0f, 2.0f) == 2.0f);
    CHECK(math::larger(2.0f, 1.0f) == 2.0f);
    CHECK(math::larger(-std::numeric_limits<float>::infinity(), -3.0f) == -3.0f);
  }
  SECTION(
      "cross-entropy of a row: loss logsumexp minus the target logit and dlogits softmax minus "
      "onehot") {
    const int64_t v = 50;
    const auto x = random_values(size_t(v), 5, 4.0f);
    const int32_t target = 17;
    const float g = math::ce_grad_scale(0.5f, 4);  // grad_scale 0.5 over a mean of 4 rows
    CHECK(g == 0.125f);
    std::vector<float> dx;
    const float loss = ce_row(x, target, g, dx);
    const double lse = logsumexp_ref(x.data(), v);
    CHECK(loss == Approx(lse - double(x[target])).epsilon(1e-6));
    double dx_sum = 0;
    for (int64_t j = 0; j < v; j++) {
      const double ref = 0.125 * (std::exp(double(x[j]) - lse) - (j == target ? 1.0 : 0.0));
      REQUIRE(dx[j] == Approx(ref).margin(1e-7));
      dx_sum += dx[j];
    }
    CHECK(std::abs(dx_sum) < 1e-6);  // the gradient of a softmax loss sums to zero over a row
    // A row of equal logits: loss log(v), every non-target dlogit g / v.
    std::vector<float> flat(size_t(v), 3.0f), dflat;
    CHECK(ce_row(flat, 0, 1.0f, dflat) == Approx(std::log(double(v))).epsilon(1e-6));
    CHECK(dflat[1] == Approx(1.0 / double(v)).epsilon(1e-6));
    CHECK(math::mean_loss(10.0, 4) == 2.5f);
  }
  SECTION("vocab-parallel halves give the whole row loss and dlogits for uneven splits") {
    const int64_t v = 37;  // split as 10 | 15 | 12
    const std::vector<int64_t> bounds = {0, 10, 25, 37};
    const auto x = random_values(size_t(v), 6, 5.0f);
    for (int32_t target : {0, 9, 10, 24, 25, 36}) {  // every part's first and last column
      INFO("target " << target);
      const int64_t parts = int64_t(bounds.size()) - 1, n = 1;
      std::vector<float> all_stats(size_t(parts * 3 * n));
      for (int64_t r = 0; r < parts; r++) {  // the local half of each rank
        const float* row = x.data() + bounds[r];
        const int64_t width = bounds[r + 1] - bounds[r];
        float mx = row[0], sum = 0.0f;
        for (int64_t j = 0; j < width; j++) mx = math::larger(mx, row[j]);
        for (int64_t j = 0; j < width; j++)
          sum = math::accumulate(sum, math::ce_exp_term(row[j], mx));
        all_stats[size_t(r * 3)] = mx;
        all_stats[size_t(r * 3 + 1)] = sum;
        all_stats[size_t(r * 3 + 2)] = math::local_target_logit(row, target, bounds[r], width);
        // Exactly one rank owns the target; the others send 0.
        const bool owns = target >= bounds[r] && target < bounds[r + 1];
        CHECK((all_stats[size_t(r * 3 + 2)] == x[size_t(target)]) == owns);
        if (!owns) CHECK(all_stats[size_t(r * 3 + 2)] == 0.0f);
      }
      const math::RowLse row = math::vocab_parallel_row_lse(all_stats.data(), n, 0, parts);
      const double lse = logsumexp_ref(x.data(), v);
      CHECK(row.lse == Approx(lse).epsilon(1e-6));
      CHECK(row.target_logit == x[size_t(target)]);
      std::vector<float> dx_whole;
      const float loss_whole = ce_row(x, target, 1.0f, dx_whole);
      CHECK(math::vocab_parallel_row_loss(row) == Approx(loss_whole).epsilon(1e-6));
      for (int64_t r = 0; r < parts; r++)
        for (int64_t j = bounds[r]; j < bounds[r + 1]; j++) {
          const bool is_target = math::is_local_target(j - bounds[r], target, bounds[r]);
          CHECK(is_target == (j == target));
          REQUIRE(math::vocab_parallel_dlogit(x[j], row.lse, is_target, 1.0f) ==
                  Approx(dx_whole[j]).margin(1e-6));
        }
    }
  }
}

TEST_CASE("kernel math: the optimizers", "[kernel_math]") {
  SECTION("AdamW per element against the double formula and at its edges") {
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    float p = 0.7f, m = 0.0f, v = 0.0f;
    double pd = 0.7, md = 0, vd = 0;
    const auto grads = random_values(8, 7);
    for (int64_t step = 1; step <= 8; step++) {
      const float g = grads[size_t(step - 1)];
      const double bias1 = math::adamw_bias_correction(beta1, step);
      CHECK(bias1 == Approx(1.0 - std::pow(double(beta1), double(step))));
      math::adamw_element(&p, g, &m, &v, lr, beta1, beta2, eps, math::adamw_decay(lr, wd), bias1,
                          math::adamw_bias_correction(beta2, step));
      pd *= 1.0 - double(lr) * wd;
      md = beta1 * md + (1.0 - beta1) * g;
      vd = beta2 * vd + (1.0 - beta2) * double(g) * g;
      const double m_hat = md / (1.0 - std::pow(double(beta1), double(step)));
      const double v_hat = vd / (1.0 - std::pow(double(beta2), double(step)));
      pd -= lr * m_hat / (std::sqrt(v_hat) + eps);
      CHECK(p == Approx(pd).epsilon(1e-5));
      CHECK(m == Approx(md).epsilon(1e-5));
      CHECK(v == Approx(vd).epsilon(1e-5));
    }
    // Step 1 with no decay moves a weight by lr against its gradient's sign, whatever its size.
    for (float g : {1e-3f, -5.0f, 300.0f}) {
      float p1 = 1.0f, m1 = 0.0f, v1 = 0.0f;
      math::adamw_element(&p1, g, &m1, &v1, lr, beta1, beta2, eps, 1.0f,
                          math::adamw_bias_correction(beta1, 1),
                          math::adamw_bias_correction(beta2, 1));
      CHECK(p1 == Approx(1.0 - lr * (g > 0 ? 1 : -1)).epsilon(1e-5));
    }
    // A zero gradient only decays the weight: p * (1 - lr * wd), exactly.
    float p0 = 2.0f, m0 = 0.0f, v0 = 0.0f;
    math::adamw_element(&p0, 0.0f, &m0, &v0, lr, beta1, beta2, eps, math::adamw_decay(lr, wd), 0.1,
                        0.05);
    CHECK(p0 == 2.0f * (1.0f - lr * wd));
    CHECK(m0 == 0.0f);
    CHECK(v0 == 0.0f);
  }
  SECTION("SGD per element: coupled decay and momentum and no buffer without momentum") {
    float p = 1.0f, buf = 0.0f;
    double pd = 1.0, bd = 0.0;
    for (float g : {0.5f, -0.25f, 0.125f}) {
      math::sgd_momentum_element(&p, g, &buf, 0.1f, 0.9f, 1e-2f);
      const double d = g + 1e-2 * pd;
      bd = 0.9 * bd + d;
      pd -= 0.1 * bd;
      CHECK(p == Approx(pd).epsilon(1e-6));
      CHECK(buf == Approx(bd).epsilon(1e-6));
    }
    float q = 1.0f;
    math::sgd_momentum_element(&q, 0.5f, nullptr, 0.1f, 0.0f, 0.0f);
    CHECK(q == 1.0f - 0.1f * 0.5f);
  }
}

TEST_CASE("the CPU kernels compute exactly the shared functions' bits", "[kernel_math]") {
  // What the GPU test (tests/gpu/test_gpu_ops.cpp) compares bit for bit rests on this: each CPU
  // element-wise kernel is the math:: function applied per element, nothing else.
  const int64_t n = 7, c = 33;
  const auto x = random_values(size_t(n * c), 8, 3.0f);
  const auto dy = random_values(size_t(n * c), 9);
  const auto bias = random_values(size_t(c), 10);
  std::vector<float> out(size_t(n * c));
  cpu::gelu_forward(out.data(), x.data(), n * c);
  for (size_t i = 0; i < out.size(); i++) REQUIRE(same_bits(out[i], math::gelu(x[i])));
  cpu::gelu_backward(out.data(), x.data(), dy.data(), n * c);
  for (size_t i = 0; i < out.size(); i++)
    REQUIRE(same_bits(out[i], math::gelu_backward(x[i], dy[i])));
  out = dy;
  cpu::axpy(out.data(), -0.3f, x.data(), n * c);
  for (size_t i = 0; i < out.size(); i++)
    REQUIRE(same_bits(out[i], math::axpy_value(dy[i], -0.3f, x[i])));

  // The bias gradient: each column's rows added in ascending order (the GPU's order too).
  std::vector<float> dbias = bias;
  cpu::bias_grad(dbias.data(), dy.data(), n, c);
  for (int64_t j = 0; j < c; j++) {
    float sum = bias[size_t(j)];
    for (int64_t i = 0; i < n; i++) sum = math::accumulate(sum, dy[size_t(i * c + j)]);
    REQUIRE(same_bits(dbias[size_t(j)], sum));
  }

  // The dlogits of the cross-entropy kernel: the row composition of ce_row above.
  std::vector<float> dlogits(size_t(n * c));
  std::vector<int32_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) targets[size_t(i)] = int32_t((i * 5) % c);
  const float loss =
      cpu::cross_entropy_forward_backward(dlogits.data(), x.data(), targets.data(), n, c, 2.0f);
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    std::vector<float> row(x.begin() + i * c, x.begin() + (i + 1) * c), drow;
    total += ce_row(row, targets[size_t(i)], math::ce_grad_scale(2.0f, n), drow);
    for (int64_t j = 0; j < c; j++) REQUIRE(same_bits(dlogits[size_t(i * c + j)], drow[j]));
  }
  CHECK(same_bits(loss, math::mean_loss(total, n)));

  // AdamW through the op (the CPU loop of core/ops/cpu/optimizer_kernels.cpp) at step 3.
  auto p = random_values(64, 11), m = random_values(64, 12), v = random_values(64, 13);
  for (float& vi : v) vi = vi * vi;  // a second moment is never negative
  const auto g = random_values(64, 14);
  auto tensor = [](const std::vector<float>& values) {
    return Tensor::from({int64_t(values.size())}, values, MemCategory::workspace);
  };
  Tensor pt = tensor(p), gt = tensor(g), mt = tensor(m), vt = tensor(v);
  ops::adamw_update(pt, gt, mt, vt, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3);
  for (size_t i = 0; i < p.size(); i++)
    math::adamw_element(&p[i], g[i], &m[i], &v[i], 1e-3f, 0.9f, 0.999f, 1e-8f,
                        math::adamw_decay(1e-3f, 0.01f), math::adamw_bias_correction(0.9f, 3),
                        math::adamw_bias_correction(0.999f, 3));
  const auto pk = pt.to_vector(), mk = mt.to_vector(), vk = vt.to_vector();
  for (size_t i = 0; i < p.size(); i++) {
    REQUIRE(same_bits(pk[i], p[i]));
    REQUIRE(same_bits(mk[i], m[i]));
    REQUIRE(same_bits(vk[i], v[i]));
  }
}

TEST_CASE("the GPU embedding backward's token groups add each token's rows in the CPU's order",
          "[kernel_math]") {
  // The grouping is host code (core/ops/cuda/token_groups.h); the loop below is the body of
  // embedding.cu's embedding_backward_wte_kernel, one (group, column) after another.
  const int64_t c = 5, vocab = 11;
  const std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 3, 7, 2, 10, 3, 5, 0};  // repeats, singles
  const int64_t count = int64_t(tokens.size());
  const cuda::TokenGroupsLayout layout = cuda::group_rows_by_token(tokens.data(), count);
  CHECK(layout.groups == 6);  // the distinct ids 0 2 3 5 7 10, in ascending order
  CHECK(std::vector<int32_t>(layout.group_token(), layout.group_token() + layout.groups) ==
        std::vector<int32_t>{0, 2, 3, 5, 7, 10});
  CHECK(std::vector<int32_t>(layout.rows(), layout.rows() + count) ==
        std::vector<int32_t>{3, 11, 7, 0, 2, 5, 9, 10, 1, 6, 4, 8});  // ascending within an id
  CHECK(layout.start()[0] == 0);
  CHECK(layout.start()[layout.groups] == count);

  const auto dout = random_values(size_t(count * c), 15, 10.0f);
  const auto init = random_values(size_t(vocab * c), 16);
  std::vector<float> dwte = init, dwpe(size_t(count * c), 0.0f);
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), 1, count, c);
  std::vector<float> grouped = init;
  for (int64_t g = 0; g < layout.groups; g++)
    for (int64_t j = 0; j < c; j++) {
      float* w = grouped.data() + int64_t(layout.group_token()[g]) * c + j;
      float sum = *w;
      for (int32_t k = layout.start()[g]; k < layout.start()[g + 1]; k++)
        sum = math::accumulate(sum, dout[size_t(int64_t(layout.rows()[k]) * c + j)]);
      *w = sum;
    }
  for (size_t i = 0; i < dwte.size(); i++) REQUIRE(same_bits(grouped[i], dwte[i]));
  CHECK(cuda::group_rows_by_token(tokens.data(), 0).groups == 0);
}

}  // namespace test_kernel_math

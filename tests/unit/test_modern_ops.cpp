// A Llama-style block's ops (issue #48): RMSNorm, SwiGLU, RoPE and grouped-query attention.
// Each backward against central finite differences (test_ops_gradcheck.h: fp32 ops, the
// difference quotient in double), each forward against a double-precision formula or a property
// that only the right op has, grouped-query attention against multi-head attention on repeated
// keys and values, bf16 storage rounded once per store, and the kernel table (emulated cuda) with
// the CPU's bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/cuda_emulation.h"
#include "core/ops/cuda_module.h"
#include "core/ops/ops.h"
#include "core/runtime/allocator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/gpu.h"
#include "core/tensor/tensor.h"
#include "test_ops_gradcheck.h"

namespace test_modern_ops {

using namespace mgpu;
using gradcheck::check;
using gradcheck::fill_randn;
using gradcheck::project;
using gradcheck::randn;
using gradcheck::randt;
using gradcheck::require_close;
using gradcheck::vec;
using gradcheck::ws;

namespace {
constexpr float kTheta = 10000.0f;

Tensor copy_of(const Tensor& t) {
  return Tensor::from(t.shape(), t.to_vector());
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

// The numeric gradient of loss() w.r.t. every element of x (central differences, as
// gradcheck::check), for checks that compare parts of a tensor separately.
std::vector<double> numeric_gradient(Tensor& x, const std::function<double()>& loss,
                                     float h = 1e-2f) {
  float* p = x.f32();
  std::vector<double> g(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); i++) {
    const float saved = p[i], plus = saved + h, minus = saved - h;
    p[i] = plus;
    const double lp = loss();
    p[i] = minus;
    const double lm = loss();
    p[i] = saved;
    g[size_t(i)] = (lp - lm) / (double(plus) - double(minus));
  }
  return g;
}

// The relative error of the analytic gradient on the columns [lo, hi) of rows of `cols`.
gradcheck::Result compare_columns(const std::vector<float>& analytic,
                                  const std::vector<double>& numeric, int64_t cols, int64_t lo,
                                  int64_t hi) {
  double diff2 = 0, a2 = 0, n2 = 0;
  for (size_t i = 0; i < analytic.size(); i++) {
    const int64_t col = int64_t(i) % cols;
    if (col < lo || col >= hi) continue;
    diff2 += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    a2 += double(analytic[i]) * analytic[i];
    n2 += numeric[i] * numeric[i];
  }
  const double scale = std::max({std::sqrt(a2), std::sqrt(n2), 1e-12});
  return {std::sqrt(diff2) / scale, std::sqrt(n2)};
}

// x [B, T, heads * D] rotated in double: the pair (2i, 2i+1) by positions[t] * theta^(-2i/D).
std::vector<double> rope_reference(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                   int64_t b, int64_t t, int64_t heads, int64_t d) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t ti = 0; ti < t; ti++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < d / 2; i++) {
          const double angle = pos[size_t(ti)] * std::pow(double(kTheta), -2.0 * i / double(d));
          const size_t e = size_t(((bi * t + ti) * heads + h) * d + 2 * i);
          y[e] = x[e] * std::cos(angle) - x[e + 1] * std::sin(angle);
          y[e + 1] = x[e] * std::sin(angle) + x[e + 1] * std::cos(angle);
        }
  return y;
}
}  // namespace

TEST_CASE("rmsnorm: forward against double, backward (input, weight) by finite differences",
          "[modern_ops][gradcheck]") {
  const int64_t n = 5, c = 8;
  Tensor x = randt({n, c}, 1), w = randt({c}, 2);
  Tensor y = ws({n, c}), rstd = ws({n}), dx = ws({n, c}), dw = ws({c});
  auto r = randn(size_t(n * c), 3);
  auto loss = [&] {
    ops::rmsnorm_forward(y, rstd, x, w);
    return project(y, r);
  };
  loss();
  const auto xv = vec(x), wv = vec(w), yv = vec(y), sv = vec(rstd);
  for (int64_t i = 0; i < n; i++) {
    double ms = 0;
    for (int64_t j = 0; j < c; j++) ms += double(xv[size_t(i * c + j)]) * xv[size_t(i * c + j)];
    const double s = 1.0 / std::sqrt(ms / double(c) + 1e-5);
    REQUIRE(sv[size_t(i)] == Approx(s).epsilon(1e-6));
    for (int64_t j = 0; j < c; j++)
      REQUIRE(yv[size_t(i * c + j)] ==
              Approx(xv[size_t(i * c + j)] * s * wv[size_t(j)]).epsilon(1e-5).margin(1e-6));
  }
  ops::rmsnorm_backward(dx, dw, Tensor::from({n, c}, r), x, w, rstd);
  require_close(check(x, vec(dx), loss), "dx");
  require_close(check(w, vec(dw), loss), "dweight");
  // dweight accumulates, dinp is overwritten: a second backward doubles one and not the other
  const auto dw1 = vec(dw), dx1 = vec(dx);
  ops::rmsnorm_backward(dx, dw, Tensor::from({n, c}, r), x, w, rstd);
  CHECK(vec(dw)[3] == Approx(2 * dw1[3]));
  CHECK(same_bits(vec(dx), dx1));
}

TEST_CASE("swiglu: forward against double, backward (gate and up) by finite differences",
          "[modern_ops][gradcheck]") {
  const int64_t n = 4, f = 6;
  Tensor gu = randt({n, 2 * f}, 1, 2.0f), y = ws({n, f}), dgu = ws({n, 2 * f});
  auto r = randn(size_t(n * f), 2);
  auto loss = [&] {
    ops::swiglu_forward(y, gu);
    return project(y, r);
  };
  loss();
  const auto g = vec(gu), yv = vec(y);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < f; j++) {
      const double gate = g[size_t(i * 2 * f + j)], up = g[size_t(i * 2 * f + f + j)];
      REQUIRE(yv[size_t(i * f + j)] ==
              Approx(gate / (1.0 + std::exp(-gate)) * up).epsilon(1e-5).margin(1e-6));
    }
  ops::swiglu_backward(dgu, gu, Tensor::from({n, f}, r));
  const std::vector<double> numeric = numeric_gradient(gu, loss);
  require_close(compare_columns(vec(dgu), numeric, 2 * f, 0, f), "dgate");
  require_close(compare_columns(vec(dgu), numeric, 2 * f, f, 2 * f), "dup");
}

TEST_CASE("rope: forward against double (interleaved pairs), backward by finite differences",
          "[modern_ops][gradcheck]") {
  const int64_t b = 2, t = 4, heads = 2, d = 6;
  const std::vector<int32_t> pos = {5, 0, 17, 1000};
  Tensor x = randt({b, t, heads * d}, 1), y = ws({b, t, heads * d});
  y = copy_of(x);
  ops::rope_forward(y, pos, int(heads), kTheta);
  const std::vector<double> ref = rope_reference(vec(x), pos, b, t, heads, d);
  const auto yv = vec(y);
  for (size_t i = 0; i < ref.size(); i++) REQUIRE(yv[i] == Approx(ref[i]).margin(1e-5));

  auto r = randn(size_t(x.numel()), 2);
  auto loss = [&] {
    y = copy_of(x);
    ops::rope_forward(y, pos, int(heads), kTheta);
    return project(y, r);
  };
  Tensor dx = Tensor::from(x.shape(), r);
  ops::rope_backward(dx, pos, int(heads), kTheta);
  require_close(check(x, vec(dx), loss), "dx");
}

TEST_CASE("rope: -p undoes p, position 0 is the identity, scores depend on m - n only",
          "[modern_ops]") {
  const int64_t b = 1, t = 3, heads = 2, d = 8;
  const std::vector<int32_t> pos = {0, 3, 4097}, neg = {0, -3, -4097};
  Tensor x = randt({b, t, heads * d}, 1);
  const auto x0 = vec(x);
  Tensor y = copy_of(x);
  ops::rope_forward(y, pos, int(heads), kTheta);
  const auto rotated = vec(y);
  CHECK(max_abs_diff(rotated, x0) > 0.1);  // it did turn something
  // token 0 sits at position 0: every bit unchanged
  for (int64_t e = 0; e < heads * d; e++) REQUIRE(rotated[size_t(e)] == x0[size_t(e)]);
  ops::rope_forward(y, neg, int(heads), kTheta);  // rotate by -p
  CHECK(max_abs_diff(vec(y), x0) < 1e-5);
  y = copy_of(x);
  ops::rope_forward(y, pos, int(heads), kTheta);
  ops::rope_backward(y, pos, int(heads), kTheta);  // the backward turns by -angle too
  CHECK(max_abs_diff(vec(y), x0) < 1e-5);

  // <rope(q, m), rope(k, n)> depends on m - n only: (7, 3) and (1004, 1000) agree, (7, 2) not.
  Tensor q = randt({1, 1, d}, 2), k = randt({1, 1, d}, 3);
  auto score = [&](int32_t m, int32_t n) {
    Tensor qr = copy_of(q), kr = copy_of(k);
    ops::rope_forward(qr, std::vector<int32_t>{m}, 1, kTheta);
    ops::rope_forward(kr, std::vector<int32_t>{n}, 1, kTheta);
    double s = 0;
    for (int64_t i = 0; i < d; i++) s += double(qr.f32()[i]) * kr.f32()[i];
    return s;
  };
  CHECK(score(7, 3) == Approx(score(1004, 1000)).epsilon(1e-5));
  CHECK(score(7, 3) == Approx(score(4, 0)).epsilon(1e-5));
  CHECK(std::fabs(score(7, 3) - score(7, 2)) > 1e-3);
}

TEST_CASE("grouped-query attention backward (dq, dk, dv) by finite differences",
          "[modern_ops][gradcheck]") {
  const int64_t b = 2, t = 5, d = 4;
  const int heads = 4;
  for (int kv_heads : {4, 2, 1}) {
    DYNAMIC_SECTION("kv_heads " << kv_heads) {
      const int64_t cols = (heads + 2 * kv_heads) * d, c = heads * d, kv_c = kv_heads * d;
      Tensor qkv = randt({b, t, cols}, 1), out = ws({b, t, c}), att = ws({b, heads, t, t});
      Tensor dqkv = ws({b, t, cols});
      auto r = randn(size_t(b * t * c), 2);
      auto loss = [&] {
        ops::attention_forward(out, att, qkv, heads, kv_heads);
        return project(out, r);
      };
      loss();
      ops::attention_backward(dqkv, Tensor::from({b, t, c}, r), qkv, att, heads, kv_heads);
      const std::vector<double> numeric = numeric_gradient(qkv, loss);
      const auto analytic = vec(dqkv);
      require_close(compare_columns(analytic, numeric, cols, 0, c), "dq");
      require_close(compare_columns(analytic, numeric, cols, c, c + kv_c), "dk");
      require_close(compare_columns(analytic, numeric, cols, c + kv_c, cols), "dv");
    }
  }
}

TEST_CASE("grouped-query attention is multi-head attention on keys and values repeated per group",
          "[modern_ops]") {
  const int64_t b = 2, t = 6, d = 4;
  const int heads = 4;
  for (int kv_heads : {2, 1}) {
    DYNAMIC_SECTION("kv_heads " << kv_heads) {
      const int64_t group = heads / kv_heads, c = heads * d, kv_c = kv_heads * d;
      const int64_t cols = c + 2 * kv_c;
      Tensor qkv = randt({b, t, cols}, 1);
      // The multi-head input: query head h gets kv head h / group's k and v.
      std::vector<float> g = vec(qkv), m(size_t(b * t * 3 * c));
      for (int64_t row = 0; row < b * t; row++)
        for (int64_t h = 0; h < heads; h++)
          for (int64_t i = 0; i < d; i++) {
            const int64_t kv = h / group;
            m[size_t(row * 3 * c + h * d + i)] = g[size_t(row * cols + h * d + i)];
            m[size_t(row * 3 * c + c + h * d + i)] = g[size_t(row * cols + c + kv * d + i)];
            m[size_t(row * 3 * c + 2 * c + h * d + i)] =
                g[size_t(row * cols + c + kv_c + kv * d + i)];
          }
      Tensor mqkv = Tensor::from({b, t, 3 * c}, m);
      Tensor out = ws({b, t, c}), att = ws({b, heads, t, t});
      Tensor mout = ws({b, t, c}), matt = ws({b, heads, t, t});
      ops::attention_forward(out, att, qkv, heads, kv_heads);
      ops::attention_forward(mout, matt, mqkv, heads);
      CHECK(max_abs_diff(vec(out), vec(mout)) <= 1e-6);
      CHECK(max_abs_diff(vec(att), vec(matt)) <= 1e-6);

      Tensor dout = randt({b, t, c}, 2), dqkv = ws({b, t, cols}), dm = ws({b, t, 3 * c});
      ops::attention_backward(dqkv, dout, qkv, att, heads, kv_heads);
      ops::attention_backward(dm, dout, mqkv, matt, heads);
      const auto dg = vec(dqkv), dmv = vec(dm);
      double dq_err = 0, dkv_err = 0, dkv_norm = 0;
      for (int64_t row = 0; row < b * t; row++)
        for (int64_t i = 0; i < d; i++) {
          for (int64_t h = 0; h < heads; h++)
            dq_err = std::max(dq_err, std::fabs(double(dg[size_t(row * cols + h * d + i)]) -
                                                dmv[size_t(row * 3 * c + h * d + i)]));
          for (int64_t kv = 0; kv < kv_heads; kv++)
            for (int64_t part : {0, 1}) {  // k, then v
              double sum = 0;
              for (int64_t h = kv * group; h < (kv + 1) * group; h++)
                sum += dmv[size_t(row * 3 * c + (1 + part) * c + h * d + i)];
              const double got = dg[size_t(row * cols + c + part * kv_c + kv * d + i)];
              dkv_err = std::max(dkv_err, std::fabs(got - sum));
              dkv_norm = std::max(dkv_norm, std::fabs(sum));
            }
        }
      CHECK(dq_err <= 1e-6);
      CHECK(dkv_norm > 0.1);
      CHECK(dkv_err <= 1e-5);
    }
  }
}

TEST_CASE("attention with kv_heads == heads is the multi-head overload, bit for bit",
          "[modern_ops]") {
  const int64_t b = 2, t = 7, c = 12;
  const int heads = 3;
  Tensor qkv = randt({b, t, 3 * c}, 1), dout = randt({b, t, c}, 2);
  Tensor out4 = ws({b, t, c}), att4 = ws({b, heads, t, t}), dqkv4 = ws({b, t, 3 * c});
  Tensor out5 = ws({b, t, c}), att5 = ws({b, heads, t, t}), dqkv5 = ws({b, t, 3 * c});
  ops::attention_forward(out4, att4, qkv, heads);
  ops::attention_forward(out5, att5, qkv, heads, heads);
  CHECK(same_bits(vec(out4), vec(out5)));
  CHECK(same_bits(vec(att4), vec(att5)));
  ops::attention_backward(dqkv4, dout, qkv, att4, heads);
  ops::attention_backward(dqkv5, dout, qkv, att5, heads, heads);
  CHECK(same_bits(vec(dqkv4), vec(dqkv5)));
}

TEST_CASE("the new ops reject mismatched shapes with one line naming the op", "[modern_ops]") {
  Tensor x = ws({4, 8}), y = ws({4, 8}), rstd = ws({4}), w = ws({7});
  REQUIRE_THROWS_AS(ops::rmsnorm_forward(y, rstd, x, w), std::invalid_argument);
  REQUIRE_THROWS_WITH(ops::rmsnorm_forward(y, rstd, x, w), Catch::StartsWith("rmsnorm_forward"));
  Tensor gu = ws({4, 7}), half = ws({4, 3});
  REQUIRE_THROWS_WITH(ops::swiglu_forward(half, gu), Catch::Contains("[N, 2F]"));
  Tensor seq = ws({1, 3, 12});
  const std::vector<int32_t> two = {0, 1}, three = {0, 1, 2};
  REQUIRE_THROWS_WITH(ops::rope_forward(seq, two, 2, kTheta), Catch::Contains("one per token"));
  REQUIRE_THROWS_WITH(ops::rope_forward(seq, three, 4, kTheta), Catch::Contains("D even"));
  Tensor qkv = ws({1, 3, 32}), out = ws({1, 3, 16}), att = ws({1, 4, 3, 3});
  REQUIRE_THROWS_WITH(ops::attention_forward(out, att, qkv, 4, 3),
                      Catch::Contains("must divide heads"));
  REQUIRE_THROWS_WITH(ops::attention_forward(out, att, qkv, 4, 1),
                      Catch::Contains("(heads + 2 kv_heads) * D"));
  REQUIRE_NOTHROW(ops::attention_forward(out, att, qkv, 4, 2));  // 32 = (4 + 2 * 2) * 4
}

namespace {
// A bf16 tensor of random values and an f32 tensor of the same (widened) values.
struct Bf16Pair {
  Tensor f32, bf16;
};
Bf16Pair bf16_pair(const Shape& s, uint64_t seed, float stddev = 1.0f) {
  auto v = randn(size_t(shape_numel(s)), seed, stddev);
  Tensor bf = ws(s, DType::bf16);
  bf.write_f32(v.data(), bf.numel());
  return {Tensor::from(s, bf.to_vector()), bf};
}
Bf16Pair bf16_zeros(const Shape& s) {
  return {ws(s), ws(s, DType::bf16)};
}
// Every stored bf16 value is the fp32 op's result rounded once (and the rounding moved some).
void require_rounded_once(const Tensor& bf, const Tensor& f32, const char* what) {
  const auto b = vec(bf), f = vec(f32);
  REQUIRE(b.size() == f.size());
  size_t differing = 0, moved = 0;
  for (size_t i = 0; i < b.size(); i++) {
    const float rounded = round_to(DType::bf16, f[i]);
    differing += std::memcmp(&b[i], &rounded, sizeof(float)) != 0;
    moved += b[i] != f[i];
  }
  INFO(what << ": " << differing << " of " << b.size() << " differ from round(fp32)");
  CHECK(differing == 0);
  CHECK(moved > 0);
}
}  // namespace

TEST_CASE("bf16: each new op stores its fp32 result rounded once", "[modern_ops][precision]") {
  const int64_t b = 2, t = 4, d = 4, n = b * t;
  const int heads = 4, kv_heads = 2;
  SECTION("rmsnorm") {
    auto x = bf16_pair({n, 16}, 1), w = bf16_pair({16}, 2), dy = bf16_pair({n, 16}, 3);
    auto y = bf16_zeros({n, 16}), dx = bf16_zeros({n, 16}), dw = bf16_zeros({16});
    Tensor rstd = ws({n}), rstd_bf = ws({n});
    ops::rmsnorm_forward(y.f32, rstd, x.f32, w.f32);
    ops::rmsnorm_forward(y.bf16, rstd_bf, x.bf16, w.bf16);
    require_rounded_once(y.bf16, y.f32, "rmsnorm_forward");
    CHECK(same_bits(vec(rstd_bf), vec(rstd)));  // rstd stays f32
    ops::rmsnorm_backward(dx.f32, dw.f32, dy.f32, x.f32, w.f32, rstd);
    ops::rmsnorm_backward(dx.bf16, dw.bf16, dy.bf16, x.bf16, w.bf16, rstd_bf);
    require_rounded_once(dx.bf16, dx.f32, "rmsnorm_backward dinp");
    require_rounded_once(dw.bf16, dw.f32, "rmsnorm_backward dweight");
  }
  SECTION("swiglu") {
    auto gu = bf16_pair({n, 24}, 1, 2.0f), dy = bf16_pair({n, 12}, 2);
    auto y = bf16_zeros({n, 12}), dgu = bf16_zeros({n, 24});
    ops::swiglu_forward(y.f32, gu.f32);
    ops::swiglu_forward(y.bf16, gu.bf16);
    require_rounded_once(y.bf16, y.f32, "swiglu_forward");
    ops::swiglu_backward(dgu.f32, gu.f32, dy.f32);
    ops::swiglu_backward(dgu.bf16, gu.bf16, dy.bf16);
    require_rounded_once(dgu.bf16, dgu.f32, "swiglu_backward");
  }
  SECTION("rope") {
    const std::vector<int32_t> pos = {3, 9, 27, 81};
    auto x = bf16_pair({b, t, heads * d}, 1);
    ops::rope_forward(x.f32, pos, heads, kTheta);
    ops::rope_forward(x.bf16, pos, heads, kTheta);
    require_rounded_once(x.bf16, x.f32, "rope_forward");
    auto dx = bf16_pair({b, t, heads * d}, 2);
    ops::rope_backward(dx.f32, pos, heads, kTheta);
    ops::rope_backward(dx.bf16, pos, heads, kTheta);
    require_rounded_once(dx.bf16, dx.f32, "rope_backward");
  }
  SECTION("grouped-query attention") {
    const int64_t cols = (heads + 2 * kv_heads) * d;
    auto qkv = bf16_pair({b, t, cols}, 1), dout = bf16_pair({b, t, heads * d}, 2);
    auto out = bf16_zeros({b, t, heads * d}), att = bf16_zeros({b, heads, t, t});
    auto dqkv = bf16_zeros({b, t, cols});
    ops::attention_forward(out.f32, att.f32, qkv.f32, heads, kv_heads);
    ops::attention_forward(out.bf16, att.bf16, qkv.bf16, heads, kv_heads);
    require_rounded_once(out.bf16, out.f32, "attention_forward out");
    require_rounded_once(att.bf16, att.f32, "attention_forward att");
    // The backward reads the stored (rounded) probabilities: give the fp32 op the same ones.
    Tensor att_read = Tensor::from(att.bf16.shape(), vec(att.bf16));
    ops::attention_backward(dqkv.f32, dout.f32, qkv.f32, att_read, heads, kv_heads);
    ops::attention_backward(dqkv.bf16, dout.bf16, qkv.bf16, att.bf16, heads, kv_heads);
    require_rounded_once(dqkv.bf16, dqkv.f32, "attention_backward");
  }
}

TEST_CASE("emulated cuda: the new ops run through the kernel table with the CPU's bits",
          "[modern_ops][cuda][emulated]") {
  setenv(cuda::kEmulationEnv, "1", 1);
  cuda::install_emulation();
  {
    Allocator gpu(Device::cuda(0));
    auto on_gpu = [&](const Tensor& h) {
      return Tensor::from(h.shape(), h.to_vector(), MemCategory::workspace, &gpu);
    };
    const int64_t b = 2, t = 3, d = 4;
    const int heads = 4, kv_heads = 1;
    const std::vector<int32_t> pos = {2, 5, 11};
    Tensor x = randt({b, t, heads * d}, 1), w = randt({heads * d}, 2), gu = randt({b, t, 8}, 3);
    Tensor qkv = randt({b, t, (heads + 2 * kv_heads) * d}, 4);
    Tensor gx = on_gpu(x), gw = on_gpu(w), ggu = on_gpu(gu), gqkv = on_gpu(qkv);
    Tensor y = ws(x.shape()), rstd = ws({b * t}), gy = on_gpu(y), grstd = on_gpu(rstd);
    ops::rmsnorm_forward(y, rstd, x, w);
    ops::rmsnorm_forward(gy, grstd, gx, gw);
    CHECK(same_bits(vec(gy), vec(y)));
    Tensor s = ws({b, t, 4}), gs = on_gpu(s);
    ops::swiglu_forward(s, gu);
    ops::swiglu_forward(gs, ggu);
    CHECK(same_bits(vec(gs), vec(s)));
    ops::rope_forward(x, pos, heads, kTheta);
    ops::rope_forward(gx, pos, heads, kTheta);
    CHECK(same_bits(vec(gx), vec(x)));
    Tensor out = ws({b, t, heads * d}), att = ws({b, heads, t, t});
    Tensor gout = on_gpu(out), gatt = on_gpu(att);
    ops::attention_forward(out, att, qkv, heads, kv_heads);
    ops::attention_forward(gout, gatt, gqkv, heads, kv_heads);
    CHECK(same_bits(vec(gout), vec(out)));
  }
  unsetenv(cuda::kEmulationEnv);
  cuda::install();  // the real table back (CUDA builds), for the tests after this one
}

}  // namespace test_modern_ops

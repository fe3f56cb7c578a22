// Every op's backward against central finite differences (see test_ops_gradcheck.h for the
// tolerance and why), plus matmul against a naive loop, the causal mask, and phantom runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/ops/cuda_table.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"
#include "test_ops_gradcheck.h"

namespace test_ops_gradcheck {

using namespace mgpu;
using gradcheck::check;
using gradcheck::fill_randn;
using gradcheck::project;
using gradcheck::randn;
using gradcheck::randt;
using gradcheck::require_close;
using gradcheck::vec;
using gradcheck::ws;

TEST_CASE("matmul matches a naive triple loop for all transpose combinations", "[ops]") {
  const int64_t m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        Tensor a = randt(ta ? Shape{k, m} : Shape{m, k}, 1);
        Tensor b = randt(tb ? Shape{n, k} : Shape{k, n}, 2);
        Tensor c = randt({m, n}, 3);
        std::vector<float> expect = vec(c);
        const float* A = a.f32();
        const float* B = b.f32();
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
              s += double(ta ? A[p * m + i] : A[i * k + p]) *
                   double(tb ? B[j * k + p] : B[p * n + j]);
            expect[size_t(i * n + j)] = float(s + beta * expect[size_t(i * n + j)]);
          }
        ops::matmul(c, a, b, ta, tb, beta);
        auto got = vec(c);
        for (size_t i = 0; i < got.size(); i++) REQUIRE(got[i] == Approx(expect[i]).margin(1e-5));
      }
    }
  }
}

TEST_CASE("matmul rejects mismatched shapes with a clear message", "[ops]") {
  Tensor a = ws({4, 3}), b = ws({4, 5}), c = ws({4, 5});
  REQUIRE_THROWS_WITH(ops::matmul(c, a, b), Catch::Contains("inner dims differ"));
}

TEST_CASE("linear backward (input, weight, bias)", "[ops][gradcheck]") {
  const int64_t n = 6, in = 5, out = 4;
  Tensor x = randt({n, in}, 1), w = randt({out, in}, 2), b = randt({out}, 3);
  Tensor y = ws({n, out}), dx = ws({n, in}), dw = ws({out, in}), db = ws({out});
  auto r = randn(size_t(n * out), 4);
  auto loss = [&] {
    ops::linear_forward(y, x, w, b);
    return project(y, r);
  };
  loss();
  Tensor dy = Tensor::from({n, out}, r);
  ops::linear_backward(dx, dw, db, dy, x, w);
  require_close(check(x, vec(dx), loss), "dx");
  require_close(check(w, vec(dw), loss), "dweight");
  require_close(check(b, vec(db), loss), "dbias");
  // parameter gradients accumulate: a second backward doubles them
  auto dw1 = vec(dw);
  ops::linear_backward(dx, dw, db, dy, x, w);
  REQUIRE(vec(dw)[3] == Approx(2 * dw1[3]));
}

TEST_CASE("layernorm backward (input, weight, bias)", "[ops][gradcheck]") {
  const int64_t n = 5, c = 8;
  Tensor x = randt({n, c}, 1), w = randt({c}, 2), b = randt({c}, 3);
  Tensor y = ws({n, c}), mean = ws({n}), rstd = ws({n});
  Tensor dx = ws({n, c}), dw = ws({c}), db = ws({c});
  auto r = randn(size_t(n * c), 4);
  auto loss = [&] {
    ops::layernorm_forward(y, mean, rstd, x, w, b);
    return project(y, r);
  };
  loss();
  ops::layernorm_backward(dx, dw, db, Tensor::from({n, c}, r), x, w, mean, rstd);
  require_close(check(x, vec(dx), loss), "dx");
  require_close(check(w, vec(dw), loss), "dweight");
  require_close(check(b, vec(db), loss), "dbias");
}

TEST_CASE("gelu backward", "[ops][gradcheck]") {
  Tensor x = randt({40}, 1, 2.0f), y = ws({40}), dx = ws({40});
  auto r = randn(40, 2);
  auto loss = [&] {
    ops::gelu_forward(y, x);
    return project(y, r);
  };
  ops::gelu_backward(dx, x, Tensor::from({40}, r));
  require_close(check(x, vec(dx), loss), "dx");
}

TEST_CASE("softmax backward", "[ops][gradcheck]") {
  Tensor x = randt({4, 9}, 1), y = ws({4, 9}), dx = ws({4, 9});
  auto r = randn(36, 2);
  auto loss = [&] {
    ops::softmax_forward(y, x);
    return project(y, r);
  };
  loss();
  ops::softmax_backward(dx, y, Tensor::from({4, 9}, r));
  require_close(check(x, vec(dx), loss), "dx");
}

TEST_CASE("causal attention backward", "[ops][gradcheck]") {
  const int64_t b = 2, t = 5, c = 8;
  const int heads = 2;
  Tensor qkv = randt({b, t, 3 * c}, 1), out = ws({b, t, c}), att = ws({b, heads, t, t});
  Tensor dqkv = ws({b, t, 3 * c});
  auto r = randn(size_t(b * t * c), 2);
  auto loss = [&] {
    ops::attention_forward(out, att, qkv, heads);
    return project(out, r);
  };
  loss();
  ops::attention_backward(dqkv, Tensor::from({b, t, c}, r), qkv, att, heads);
  require_close(check(qkv, vec(dqkv), loss), "dqkv");
}

TEST_CASE("attention is causal: output at t ignores inputs after t", "[ops]") {
  const int64_t b = 1, t = 6, c = 8;
  const int heads = 2, t0 = 2;
  Tensor qkv = randt({b, t, 3 * c}, 1), out1 = ws({b, t, c}), out2 = ws({b, t, c});
  Tensor att = ws({b, heads, t, t});
  ops::attention_forward(out1, att, qkv, heads);
  // probabilities above the diagonal are exactly zero, rows sum to one
  auto a = vec(att);
  for (int64_t i = 0; i < t; i++) {
    double sum = 0;
    for (int64_t j = 0; j < t; j++) {
      if (j > i) REQUIRE(a[size_t(i * t + j)] == 0.0f);
      sum += a[size_t(i * t + j)];
    }
    REQUIRE(sum == Approx(1.0));
  }
  float* p = qkv.f32();
  for (int64_t i = (t0 + 1) * 3 * c; i < t * 3 * c; i++) p[i] += 10.0f;  // change the future
  ops::attention_forward(out2, att, qkv, heads);
  auto o1 = vec(out1), o2 = vec(out2);
  for (int64_t i = 0; i < (t0 + 1) * c; i++) REQUIRE(o1[size_t(i)] == o2[size_t(i)]);
  bool later_changed = false;
  for (int64_t i = (t0 + 1) * c; i < t * c; i++) later_changed |= o1[size_t(i)] != o2[size_t(i)];
  REQUIRE(later_changed);
}

TEST_CASE("embedding backward scatter-adds (repeated tokens included)", "[ops][gradcheck]") {
  const int64_t b = 2, t = 3, c = 4, vocab = 5;
  std::vector<int32_t> tokens = {1, 3, 1, 4, 1, 0};  // token 1 three times
  Tensor wte = randt({vocab, c}, 1), wpe = randt({t + 1, c}, 2), out = ws({b, t, c});
  Tensor dwte = ws({vocab, c}), dwpe = ws({t + 1, c});
  auto r = randn(size_t(b * t * c), 3);
  auto loss = [&] {
    ops::embedding_forward(out, tokens, wte, wpe);
    return project(out, r);
  };
  ops::embedding_backward(dwte, dwpe, Tensor::from({b, t, c}, r), tokens);
  require_close(check(wte, vec(dwte), loss), "dwte");
  require_close(check(wpe, vec(dwpe), loss), "dwpe");
  std::vector<int32_t> bad = {1, 3, 9, 4, 1, 0};
  REQUIRE_THROWS_WITH(ops::embedding_forward(out, bad, wte, wpe),
                      Catch::Contains("outside the vocabulary"));
}

TEST_CASE("cross-entropy: mean loss and fused dlogits", "[ops][gradcheck]") {
  const int64_t n = 6, v = 7;
  std::vector<int32_t> targets = {0, 6, 3, 3, 1, 5};
  Tensor logits = randt({n, v}, 1), dlogits = ws({n, v});
  float loss0 = ops::cross_entropy_forward_backward(dlogits, logits, targets);
  REQUIRE(loss0 == Approx(ops::cross_entropy_loss(logits, targets)));
  // uniform logits: loss is log(V)
  Tensor flat = ws({n, v});
  REQUIRE(ops::cross_entropy_loss(flat, targets) == Approx(std::log(7.0)));
  auto loss = [&] { return double(ops::cross_entropy_loss(logits, targets)); };
  require_close(check(logits, vec(dlogits), loss), "dlogits");
  // grad_scale scales the gradient only
  Tensor d2 = ws({n, v});
  REQUIRE(ops::cross_entropy_forward_backward(d2, logits, targets, 0.25f) == Approx(loss0));
  REQUIRE(vec(d2)[2] == Approx(0.25f * vec(dlogits)[2]));
}

TEST_CASE("gelu and cross-entropy values match double-precision formulas", "[ops]") {
  // The kernels' exp is a polynomial (vectorisable, ~1 ulp): their values must stay within float
  // rounding of the exact formulas, over the whole range GELU sees, saturation included.
  std::vector<float> xs;
  for (float x = -60.0f; x <= 60.0f; x += 0.0137f) xs.push_back(x);
  for (float x : {-1e30f, -100.0f, 0.0f, 100.0f, 1e30f}) xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  Tensor x = Tensor::from({n}, xs), y = ws({n});
  ops::gelu_forward(y, x);
  const std::vector<float> got = vec(y);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i];
    const double exact = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    worst = std::max(worst, std::abs(got[i] - exact) / std::max(std::abs(v), 1.0));
  }
  CAPTURE(worst);
  CHECK(worst < 1e-6);         // of max(|x|, 1): both libm's expf and the polynomial give ~1e-7
  CHECK(got.back() == 1e30f);  // saturated: x itself
  CHECK(got[n - 5] == -0.0f);  // x = -1e30: 0

  const int64_t rows = 3, v = 50;
  std::vector<int32_t> targets = {0, 17, 49};
  Tensor logits = randt({rows, v}, 3, 4.0f), dlogits = ws({rows, v});
  const float loss = ops::cross_entropy_forward_backward(dlogits, logits, targets);
  const std::vector<float> l = vec(logits), d = vec(dlogits);
  double exact_loss = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(double(l[i * v + j]));
    exact_loss += std::log(sum) - l[i * v + targets[i]];
    for (int64_t j = 0; j < v; ++j) {
      const double p = std::exp(double(l[i * v + j])) / sum - (j == targets[i] ? 1 : 0);
      CHECK(d[i * v + j] == Approx(p / rows).margin(1e-7).epsilon(1e-5));
    }
  }
  CHECK(loss == Approx(exact_loss / rows).epsilon(1e-6));
}

TEST_CASE("elementwise helpers: add, axpy, scale, bias_grad", "[ops]") {
  Tensor a = Tensor::from({2, 2}, {1, 2, 3, 4}), b = Tensor::from({2, 2}, {10, 20, 30, 40});
  Tensor out = ws({2, 2});
  ops::add(out, a, b);
  REQUIRE(vec(out) == std::vector<float>{11, 22, 33, 44});
  ops::axpy(out, -1.0f, b);
  REQUIRE(vec(out) == std::vector<float>{1, 2, 3, 4});
  ops::scale(out, 2.0f);
  REQUIRE(vec(out) == std::vector<float>{2, 4, 6, 8});
  Tensor db = Tensor::from({2}, {1, 1});
  ops::bias_grad(db, out);
  REQUIRE(vec(db) == std::vector<float>{9, 13});
}

TEST_CASE("phantom device: ops do no math but advance the modeled clock", "[ops][phantom]") {
  HardwareProfile profile;
  profile.peak_flops = 1e12;
  profile.mem_bandwidth = 1e11;
  profile.launch_overhead = 1e-6;
  RankContext ctx(0, 1, Device::phantom(), profile, ClockKind::modeled);
  ScopedRank guard(ctx);
  const int64_t m = 64, n = 32, k = 128;
  Tensor a = Tensor::empty({m, k}, MemCategory::activations);
  Tensor b = Tensor::empty({k, n}, MemCategory::activations);
  Tensor c = Tensor::empty({m, n}, MemCategory::activations);
  REQUIRE_FALSE(c.has_data());
  ops::matmul(c, a, b);
  const double expected = profile.kernel_time(2.0 * m * n * k, 4.0 * (m * k + k * n + m * n));
  REQUIRE(ctx.clock.compute_now() == Approx(expected));
  // the kernel was recorded with its FLOPs (no scope open)
  REQUIRE(ctx.tracer.events().size() == 1);
  REQUIRE(ctx.tracer.events()[0].flops == Approx(2.0 * m * n * k));

  // a whole layer's worth of ops runs without data
  Tensor qkv = Tensor::empty({2, 8, 3 * 16}, MemCategory::activations);
  Tensor out = Tensor::empty({2, 8, 16}, MemCategory::activations);
  Tensor att = Tensor::empty({2, 4, 8, 8}, MemCategory::activations);
  ops::attention_forward(out, att, qkv, 4);
  ops::attention_backward(qkv, out, qkv, att, 4);
  std::vector<int32_t> targets(16, 0);
  Tensor logits = Tensor::empty({16, 10}, MemCategory::activations);
  REQUIRE(ops::cross_entropy_forward_backward(logits, logits, targets) == 0.0f);
  REQUIRE(ctx.clock.compute_now() > expected);
}

namespace {
// Stand-in "CUDA" memory in host memory, so the dispatch seam can be tested without a GPU.
void* fake_alloc(int64_t bytes, int) {
  return std::calloc(size_t(bytes), 1);
}
void fake_release(void* p, int) {
  std::free(p);
}
void fake_copy(void* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, size_t(bytes));
}
int g_fake_add_calls = 0;
void fake_add(float* out, const float* a, const float* b, int64_t count) {
  g_fake_add_calls++;
  for (int64_t i = 0; i < count; i++) out[i] = a[i] + b[i];
}
}  // namespace

TEST_CASE("cuda dispatch goes through the kernel table, or says the kernel is missing", "[ops]") {
  if (device_memory_hooks(DeviceKind::cuda).allocate != nullptr) {
    SUCCEED("a real CUDA module is installed; its own tests cover dispatch");
    return;
  }
  set_device_memory_hooks(DeviceKind::cuda, {fake_alloc, fake_release, fake_copy});
  {
    Allocator gpu(Device::cuda(0));
    Tensor a = Tensor::empty({4}, MemCategory::workspace, DType::f32, &gpu);
    Tensor b = Tensor::empty({4}, MemCategory::workspace, DType::f32, &gpu);
    Tensor out = Tensor::empty({4}, MemCategory::workspace, DType::f32, &gpu);
    REQUIRE_THROWS_WITH(ops::add(out, a, b),
                        Catch::Contains("add: this op has no CUDA kernel yet"));
    CudaKernels table;
    table.add = fake_add;
    install_cuda_kernels(table);
    ops::add(out, a, b);
    REQUIRE(g_fake_add_calls == 1);
    REQUIRE_THROWS_WITH(ops::gelu_forward(out, a), Catch::Contains("no CUDA kernel yet"));
    install_cuda_kernels(CudaKernels{});
  }
  set_device_memory_hooks(DeviceKind::cuda, {});
}

}  // namespace test_ops_gradcheck

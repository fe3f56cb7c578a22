// Every CUDA kernel against the CPU reference on the same inputs, then a whole GPT
// forward/backward and AdamW/SGD steps. Without a GPU each test WARNs "no CUDA GPU: skipped" (and
// gpu_main.cpp exits 77 first).
//
// Two strengths of comparison. The kernels whose every output element is core/ops/math/'s
// arithmetic applied in the CPU's order (element-wise ops, GELU, embedding forward and backward,
// the column sums of bias and layernorm gradients, the optimizers) must give the CPU's bits:
// require_same_bits (both sides call the same functions, and neither fuses a multiply-add). The
// ones that reduce a row in a block (layernorm, softmax, cross-entropy) add in another order and
// call CUDA's expf/logf: within require_close's fp32 tolerance (gpu_test_util.h).
#include <numeric>
#include <string>

#include "core/model/gpt.h"
#include "core/ops/cuda_table.h"
#include "core/ops/ops.h"
#include "core/ops/optimizer_kernels.h"
#include "gpu_test_util.h"

using namespace mgpu;
using gpu_test::GpuRank;
using gpu_test::random_ids;
using gpu_test::require_close;
using gpu_test::require_same_bits;

TEST_CASE("every CudaKernels entry is installed", "[gpu]") {
  MGPU_REQUIRE_GPU();
  const CudaKernels& k = cuda_kernels();
  CHECK(k.matmul);
  CHECK(k.attention_forward);
  CHECK(k.adamw);
  CHECK(k.vocab_parallel_ce_stats);
  CHECK(k.vocab_parallel_ce_forward_backward);
}

TEST_CASE("gpu matmul matches cpu in all four transpose modes, with beta", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t m = 37, n = 53, k = 29;  // odd sizes: catch leading-dimension mistakes
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto [a, ga] = g.pair(ta ? Shape{k, m} : Shape{m, k}, 1);
      auto [b, gb] = g.pair(tb ? Shape{n, k} : Shape{k, n}, 2);
      auto [c, gc] = g.pair({m, n}, 3);
      ops::matmul(c, a, b, ta, tb, 0.5f);
      ops::matmul(gc, ga, gb, ta, tb, 0.5f);
      INFO("trans_a " << ta << " trans_b " << tb);
      require_close(gc, c, "matmul");
    }
}

TEST_CASE("gpu element-wise ops give the cpu bits", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t n = 67, c = 300;
  auto [x, gx] = g.pair({n, c}, 4);
  auto [y, gy] = g.pair({n, c}, 5);
  auto [bias, gbias] = g.pair({c}, 6);

  ops::bias_add(x, bias);
  ops::bias_add(gx, gbias);
  require_same_bits(gx, x, "bias_add");

  ops::bias_grad(bias, y);  // accumulates into the random bias
  ops::bias_grad(gbias, gy);
  require_same_bits(gbias, bias, "bias_grad");  // rows added in order, no atomics

  Tensor out = g.cpu_zeros({n, c}), gout = g.gpu(out);
  ops::add(out, x, y);
  ops::add(gout, gx, gy);
  require_same_bits(gout, out, "add");

  ops::axpy(out, -0.3f, x);
  ops::axpy(gout, -0.3f, gx);
  require_same_bits(gout, out, "axpy");

  ops::scale(out, 1.7f);
  ops::scale(gout, 1.7f);
  require_same_bits(gout, out, "scale");

  ops::gelu_forward(out, x);
  ops::gelu_forward(gout, gx);
  require_same_bits(gout, out, "gelu_forward");

  Tensor din = g.cpu_zeros({n, c}), gdin = g.gpu(din);
  ops::gelu_backward(din, x, y);
  ops::gelu_backward(gdin, gx, gy);
  require_same_bits(gdin, din, "gelu_backward");
}

TEST_CASE("gpu layernorm and softmax match cpu", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  for (int64_t c : {8, 768, 1000}) {  // below, at and not a multiple of the block size
    const int64_t n = 45;
    INFO("c = " << c);
    auto [x, gx] = g.pair({n, c}, 7, 2.0f);
    auto [w, gw] = g.pair({c}, 8);
    auto [b, gb] = g.pair({c}, 9);
    auto [dy, gdy] = g.pair({n, c}, 10);
    Tensor out = g.cpu_zeros({n, c}), mean = g.cpu_zeros({n}), rstd = g.cpu_zeros({n});
    Tensor gout = g.gpu(out), gmean = g.gpu(mean), grstd = g.gpu(rstd);
    ops::layernorm_forward(out, mean, rstd, x, w, b);
    ops::layernorm_forward(gout, gmean, grstd, gx, gw, gb);
    require_close(gout, out, "layernorm out");
    require_close(gmean, mean, "layernorm mean");
    require_close(grstd, rstd, "layernorm rstd");

    auto [dw, gdw] = g.pair({c}, 11);  // random: backward accumulates
    auto [db, gdb] = g.pair({c}, 12);
    Tensor dx = g.cpu_zeros({n, c}), gdx = g.gpu(dx);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd);
    require_close(gdx, dx, "layernorm dinp");
    require_close(gdw, dw, "layernorm dweight");
    require_close(gdb, db, "layernorm dbias");
    // dweight and dbias are column sums added row after row as on the CPU: given the CPU's
    // mean and rstd (the GPU's own differ by the order of the forward's row sums), the same bits.
    auto [dw2, gdw2] = g.pair({c}, 21);
    auto [db2, gdb2] = g.pair({c}, 22);
    Tensor cpu_mean = g.gpu(mean), cpu_rstd = g.gpu(rstd);
    ops::layernorm_backward(dx, dw2, db2, dy, x, w, mean, rstd);
    ops::layernorm_backward(gdx, gdw2, gdb2, gdy, gx, gw, cpu_mean, cpu_rstd);
    require_same_bits(gdw2, dw2, "layernorm dweight from the cpu's mean and rstd");
    require_same_bits(gdb2, db2, "layernorm dbias from the cpu's mean and rstd");

    ops::softmax_forward(out, x);
    ops::softmax_forward(gout, gx);
    require_close(gout, out, "softmax");
    ops::softmax_backward(dx, out, dy);
    ops::softmax_backward(gdx, gout, gdy);
    require_close(gdx, dx, "softmax backward");
  }
}

TEST_CASE("gpu causal attention forward and backward match cpu", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t b = 2, t = 33, c = 48, heads = 4;  // hs = 12, T not a power of two
  auto [qkv, gqkv] = g.pair({b, t, 3 * c}, 13);
  auto [dout, gdout] = g.pair({b, t, c}, 14);
  Tensor out = g.cpu_zeros({b, t, c}), att = g.cpu_zeros({b, heads, t, t});
  Tensor gout = g.gpu(out), gatt = g.gpu(att);
  ops::attention_forward(out, att, qkv, heads);
  ops::attention_forward(gout, gatt, gqkv, heads);
  require_close(gatt, att, "attention probabilities (zero above the diagonal)");
  require_close(gout, out, "attention out");

  Tensor dqkv = g.cpu_zeros({b, t, 3 * c}), gdqkv = g.gpu(dqkv);
  ops::attention_backward(dqkv, dout, qkv, att, heads);
  ops::attention_backward(gdqkv, gdout, gqkv, gatt, heads);
  require_close(gdqkv, dqkv, "attention dqkv");
}

TEST_CASE("gpu embedding gives the cpu bits and cross-entropy matches cpu", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t b = 3, t = 17, c = 40, vocab = 29;
  auto tokens = random_ids(size_t(b * t), int(vocab), 15);  // repeats: exercises the atomics
  auto [wte, gwte] = g.pair({vocab, c}, 16);
  auto [wpe, gwpe] = g.pair({t, c}, 17);
  Tensor out = g.cpu_zeros({b, t, c}), gout = g.gpu(out);
  ops::embedding_forward(out, tokens, wte, wpe);
  ops::embedding_forward(gout, tokens, gwte, gwpe);
  require_same_bits(gout, out, "embedding forward");
  auto [dout, gdout] = g.pair({b, t, c}, 18);
  ops::embedding_backward(wte, wpe, dout, tokens);  // accumulates into the weights
  ops::embedding_backward(gwte, gwpe, gdout, tokens);
  // The scatter-add adds a token's rows in the CPU's order (grouped by token, no atomics).
  require_same_bits(gwte, wte, "embedding dwte");
  require_same_bits(gwpe, wpe, "embedding dwpe");

  for (int64_t v : {29, 50257}) {  // tiny and GPT-2 vocabularies
    INFO("vocab " << v);
    const int64_t n = 19;
    auto targets = random_ids(size_t(n), int(v), 19);
    auto [logits, glogits] = g.pair({n, v}, 20, 3.0f);
    require_close(ops::cross_entropy_loss(glogits, targets),
                  ops::cross_entropy_loss(logits, targets), "cross_entropy_loss");
    Tensor dl = g.cpu_zeros({n, v}), gdl = g.gpu(dl);
    float loss = ops::cross_entropy_forward_backward(dl, logits, targets, 0.5f);
    float gloss = ops::cross_entropy_forward_backward(gdl, glogits, targets, 0.5f);
    require_close(gloss, loss, "cross_entropy loss");
    require_close(gdl, dl, "cross_entropy dlogits");
    // In place (dlogits aliases logits), as the model's head does.
    float gloss2 = ops::cross_entropy_forward_backward(glogits, glogits, targets, 0.5f);
    require_close(gloss2, loss, "in-place loss");
    require_close(glogits, dl, "in-place dlogits");
  }
}

TEST_CASE("gpu vocab-parallel cross-entropy halves match cpu for uneven splits", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t n = 23;
  for (int64_t vocab : {29, 50257}) {
    INFO("vocab " << vocab);
    // Three ranks' column ranges, uneven: [0, a), [a, b), [b, vocab).
    const std::vector<int64_t> begin = {0, vocab / 3 + 1, 2 * vocab / 3 + 2, vocab};
    const int64_t parts = 3;
    auto targets = random_ids(size_t(n), int(vocab), 40);
    targets[0] = int32_t(begin[1]);      // a part's first column
    targets[1] = int32_t(begin[2] - 1);  // and its last
    std::vector<Tensor> logits, glogits;
    std::vector<float> all_stats;  // the cpu's [parts, 3, n], as the all-gather leaves it
    for (int64_t r = 0; r < parts; r++) {
      auto [l, gl] = g.pair({n, begin[r + 1] - begin[r]}, 41 + uint64_t(r), 3.0f);
      Tensor stats = g.cpu_zeros({3, n}), gstats = g.gpu(stats);
      ops::vocab_parallel_ce_stats(stats, l, targets, begin[r]);
      ops::vocab_parallel_ce_stats(gstats, gl, targets, begin[r]);
      require_close(gstats, stats, "local stats (max, sum of exps, target logit)");
      const auto st = stats.to_vector(), gst = gstats.to_vector();
      for (int64_t i = 0; i < n; i++) {  // the max and the target's logit are exact
        CHECK(gst[size_t(i)] == st[size_t(i)]);
        CHECK(gst[size_t(2 * n + i)] == st[size_t(2 * n + i)]);
      }
      all_stats.insert(all_stats.end(), st.begin(), st.end());
      logits.push_back(l);
      glogits.push_back(gl);
    }
    // The global half on each rank's columns, both sides from the same (the cpu's) stats.
    Tensor stats_all = g.cpu({parts, 3, n}, all_stats), gstats_all = g.gpu(stats_all);
    for (int64_t r = 0; r < parts; r++) {
      INFO("rank " << r);
      Tensor dl = g.cpu_zeros(logits[size_t(r)].shape()), gdl = g.gpu(dl);
      const float loss = ops::vocab_parallel_ce_forward_backward(dl, logits[size_t(r)], stats_all,
                                                                 targets, begin[r], 0.5f);
      const float gloss = ops::vocab_parallel_ce_forward_backward(
          gdl, glogits[size_t(r)], gstats_all, targets, begin[r], 0.5f);
      require_close(gloss, loss, "vocab-parallel loss");
      require_close(gdl, dl, "vocab-parallel dlogits");
    }
  }
}

TEST_CASE("gpu SGD-momentum and AdamW give the cpu bits over several steps", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t n = 1003;
  auto [p, gp] = g.pair({n}, 21);
  Tensor m = g.cpu_zeros({n}), gm = g.gpu(m);
  Tensor v = g.cpu_zeros({n}), gv = g.gpu(v);
  for (int step = 1; step <= 5; ++step) {
    auto [grad, ggrad] = g.pair({n}, 100 + step);
    ops::adamw_update(p, grad, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    ops::adamw_update(gp, ggrad, gm, gv, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  require_same_bits(gp, p, "adamw param");
  require_same_bits(gm, m, "adamw m");
  require_same_bits(gv, v, "adamw v");

  Tensor buf = g.cpu_zeros({n}), gbuf = g.gpu(buf);
  for (int step = 1; step <= 5; ++step) {
    auto [grad, ggrad] = g.pair({n}, 200 + step);
    ops::sgd_momentum_update(p, grad, buf, 0.1f, 0.9f, 1e-4f);
    ops::sgd_momentum_update(gp, ggrad, gbuf, 0.1f, 0.9f, 1e-4f);
  }
  require_same_bits(gp, p, "sgd param");
  require_same_bits(gbuf, buf, "sgd momentum buffer");
}

TEST_CASE("a GPT forward/backward on the GPU matches the CPU (same weights, same batch)", "[gpu]") {
  MGPU_REQUIRE_GPU();
  gpu_test::require_gpt_matches_cpu(gpu_test::small_gpt_config(), /*batch=*/3, /*seed=*/30);
}

TEST_CASE("the caching allocator reuses a freed block and hands it out zeroed", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  CHECK(cuda::memory_info(0).total > 0);
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, MemCategory::workspace, DType::f32, &g.ctx.allocator);
    t.fill(3.0f);
    CHECK(t.to_vector() == std::vector<float>(1000, 3.0f));
    first = t.raw();
  }
  CHECK(cuda::cached_bytes() >= 4000);
  Tensor u = Tensor::empty({1000}, MemCategory::workspace, DType::f32, &g.ctx.allocator);
  CHECK(u.raw() == first);  // same stream, same size class: the cached block
  CHECK(u.to_vector() == std::vector<float>(1000, 0.0f));
  CHECK(g.ctx.allocator.stats().current[int(MemCategory::workspace)] == 4000);  // books unchanged
}

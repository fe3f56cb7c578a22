// A Llama-style block's CUDA kernels (core/ops/cuda/llama_kernels.cu; grouped-query attention in
// gemm_attention.cu) against their CPU kernels on the same inputs. Both sides call
// core/ops/math/llama.h without fused multiply-adds, so:
//  - SwiGLU, RoPE and RMSNorm's dweight (rows added in the CPU's order, given the CPU's rstd) must
//    give the CPU's bits (RoPE: up to CUDA's double cos/sin rounding to another float, which the
//    math header says is all but impossible);
//  - RMSNorm's rows are reduced in a tree on the GPU, and attention is cuBLAS: within the fp32
//    tolerance of gpu_test_util.h.
// Without a GPU each test WARNs "no CUDA GPU: skipped" (and gpu_main.cpp exits 77 first).
#include <vector>

#include "core/ops/ops.h"
#include "gpu_test_util.h"

using namespace mgpu;
using gpu_test::GpuRank;
using gpu_test::require_close;
using gpu_test::require_same_bits;

TEST_CASE("gpu rmsnorm and swiglu match cpu", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  for (int64_t c : {8, 768, 1000}) {  // below, at and not a multiple of the block size
    const int64_t n = 45;
    INFO("c = " << c);
    auto [x, gx] = g.pair({n, c}, 1, 2.0f);
    auto [w, gw] = g.pair({c}, 2);
    auto [dy, gdy] = g.pair({n, c}, 3);
    Tensor out = g.cpu_zeros({n, c}), rstd = g.cpu_zeros({n});
    Tensor gout = g.gpu(out), grstd = g.gpu(rstd);
    ops::rmsnorm_forward(out, rstd, x, w);
    ops::rmsnorm_forward(gout, grstd, gx, gw);
    require_close(gout, out, "rmsnorm out");
    require_close(grstd, rstd, "rmsnorm rstd");
    auto [dw, gdw] = g.pair({c}, 4);  // random: the backward accumulates
    Tensor dx = g.cpu_zeros({n, c}), gdx = g.gpu(dx), cpu_rstd = g.gpu(rstd);
    ops::rmsnorm_backward(dx, dw, dy, x, w, rstd);
    ops::rmsnorm_backward(gdx, gdw, gdy, gx, gw, cpu_rstd);
    require_close(gdx, dx, "rmsnorm dinp");
    require_same_bits(gdw, dw, "rmsnorm dweight from the cpu's rstd");

    auto [gu, ggu] = g.pair({n, 2 * c}, 5, 3.0f);
    Tensor s = g.cpu_zeros({n, c}), gs = g.gpu(s);
    ops::swiglu_forward(s, gu);
    ops::swiglu_forward(gs, ggu);
    require_same_bits(gs, s, "swiglu_forward");
    Tensor dgu = g.cpu_zeros({n, 2 * c}), gdgu = g.gpu(dgu);
    ops::swiglu_backward(dgu, gu, dy);
    ops::swiglu_backward(gdgu, ggu, gdy);
    require_same_bits(gdgu, dgu, "swiglu_backward");
  }
}

TEST_CASE("gpu rope and grouped-query attention match cpu", "[gpu]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t b = 2, t = 33, d = 12, heads = 4;  // T not a power of two
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; i++) pos[size_t(i)] = int32_t(4000 + 7 * i);  // a later chunk's
  auto [x, gx] = g.pair({b, t, heads * d}, 6);
  ops::rope_forward(x, pos, int(heads), 10000.0f);
  ops::rope_forward(gx, pos, int(heads), 10000.0f);
  require_same_bits(gx, x, "rope_forward");
  ops::rope_backward(x, pos, int(heads), 500000.0f);
  ops::rope_backward(gx, pos, int(heads), 500000.0f);
  require_same_bits(gx, x, "rope_backward");

  for (int64_t kv_heads : {4, 2, 1}) {
    INFO("kv_heads = " << kv_heads);
    const int64_t cols = (heads + 2 * kv_heads) * d;
    auto [qkv, gqkv] = g.pair({b, t, cols}, 7);
    auto [dout, gdout] = g.pair({b, t, heads * d}, 8);
    Tensor out = g.cpu_zeros({b, t, heads * d}), att = g.cpu_zeros({b, heads, t, t});
    Tensor gout = g.gpu(out), gatt = g.gpu(att);
    ops::attention_forward(out, att, qkv, int(heads), int(kv_heads));
    ops::attention_forward(gout, gatt, gqkv, int(heads), int(kv_heads));
    require_close(gatt, att, "attention probabilities");
    require_close(gout, out, "attention out");
    Tensor dqkv = g.cpu_zeros({b, t, cols}), gdqkv = g.gpu(dqkv);
    ops::attention_backward(dqkv, dout, qkv, att, int(heads), int(kv_heads));
    ops::attention_backward(gdqkv, gdout, gqkv, gatt, int(heads), int(kv_heads));
    require_close(gdqkv, dqkv, "attention dqkv");
  }
}

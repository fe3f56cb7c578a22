// Ring attention's four CUDA kernels (core/ops/cuda/ring_attention.cu) and the MoE permutation's
// three (core/ops/cuda/moe_rows.cu) against their CPU kernels on the same inputs. Both sides run
// the row math of core/ops/math/ in the same order without fused multiply-adds, so:
//  - the permutation and copy_columns involve no exp or log: the GPU must give the CPU's bits;
//  - attention's results differ only where CUDA's expf/logf round differently from the host's:
//    within the fp32 tolerance of gpu_test_util.h.
// Then an MoE GPT forward/backward on the GPU against the CPU. Without a GPU each test WARNs
// "no CUDA GPU: skipped" (and gpu_main.cpp exits 77 first).
#include <cstring>
#include <limits>

#include "core/ops/ops.h"
#include "exercises/exercises.h"
#include "gpu_test_util.h"

using namespace mgpu;
using gpu_test::GpuRank;
using gpu_test::require_close;
using gpu_test::require_same_bits;

namespace {

// Scores: masked pairs must be -inf on both sides, the others close (inf - inf is no distance).
void require_scores_close(GpuRank& rank, const Tensor& gpu, const Tensor& cpu) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g = gpu.to_vector(), c = cpu.to_vector();
  REQUIRE(g.size() == c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    INFO("score " << i << ": gpu " << g[i] << ", cpu " << c[i]);
    REQUIRE((g[i] == -inf) == (c[i] == -inf));
    if (c[i] == -inf) g[i] = c[i] = 0.0f;
  }
  // the finite values, compared with the common tolerance
  require_close(rank.cpu({int64_t(g.size())}, g), rank.cpu({int64_t(c.size())}, c), "scores");
}

struct RingCase {
  const char* name;
  std::vector<int32_t> q_pos, kv_pos;  // global positions: decide which pairs are visible
};

// Zigzag-like splits of a 16-token sequence: a block fully visible, one partly visible, one that
// a query sees none of (its lse stays -inf), and keys interleaved with the queries.
std::vector<RingCase> ring_cases() {
  return {{"own block", {0, 1, 2, 3, 12, 13, 14, 15}, {0, 1, 2, 3, 12, 13, 14, 15}},
          {"earlier block", {8, 9, 10, 11}, {0, 1, 2, 3}},
          {"partly visible", {4, 5, 10, 11}, {3, 5, 6, 9, 10, 15}},
          {"a query sees none", {1, 2, 14}, {4, 7, 8}}};
}

}  // namespace

TEST_CASE("gpu attention block forward and backward match cpu", "[gpu][ring]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t b = 2, c = 24, heads = 3, t = 16;  // head size 8
  // multi-head (3 kv heads) and grouped-query (1 kv head: its dK|dV sums the 3 query heads')
  for (const int64_t kv_heads : {heads, int64_t{1}})
    for (const RingCase& rc : ring_cases()) {
      INFO(rc.name << ", " << kv_heads << " kv heads");
      const int64_t tq = int64_t(rc.q_pos.size()), tk = int64_t(rc.kv_pos.size());
      const int64_t kv_c = kv_heads * (c / heads);
      const int h = int(heads), kvh = int(kv_heads);
      auto [q, gq] = g.pair({b, tq, c}, 1);
      auto [kv, gkv] = g.pair({b, tk, 2 * kv_c}, 2);
      // scores start non-zero: columns of positions outside the block must stay untouched
      auto [scores, gscores] = g.pair({b, heads, tq, t}, 3);
      Tensor out = g.cpu_zeros({b, tq, c}), gout = g.gpu(out);
      Tensor lse = g.cpu_zeros({b, heads, tq}), glse = g.gpu(lse);
      ops::attention_block_forward(out, lse, scores, q, kv, rc.q_pos, rc.kv_pos, h, kvh);
      ops::attention_block_forward(gout, glse, gscores, gq, gkv, rc.q_pos, rc.kv_pos, h, kvh);
      require_close(gout, out, "block out");
      require_scores_close(g, gscores, scores);
      require_scores_close(g, glse, lse);  // a query that sees no key: lse -inf on both

      // backward accumulates (+=) into dq and dkv: start them non-zero
      auto [dout, gdout] = g.pair({b, tq, c}, 4);
      auto [dq, gdq] = g.pair({b, tq, c}, 5);
      auto [dkv, gdkv] = g.pair({b, tk, 2 * kv_c}, 6);
      ops::attention_block_backward(dq, dkv, dout, out, q, kv, scores, lse, rc.q_pos, rc.kv_pos, h,
                                    kvh);
      ops::attention_block_backward(gdq, gdkv, gdout, gout, gq, gkv, gscores, glse, rc.q_pos,
                                    rc.kv_pos, h, kvh);
      require_close(gdq, dq, "block dq");
      require_close(gdkv, dkv, "block dk|dv");
    }
}

TEST_CASE("gpu attention merge matches cpu, empty parts included", "[gpu][ring]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t b = 2, t = 5, c = 12, heads = 2;
  const float inf = std::numeric_limits<float>::infinity();
  auto [out, gout] = g.pair({b, t, c}, 7);
  auto [block_out, gblock_out] = g.pair({b, t, c}, 8);
  // lse rows: ordinary, one side empty (-inf), both empty, far from zero
  std::vector<float> la = GpuRank::randn(b * heads * t, 9, 2.0f);
  std::vector<float> lb = GpuRank::randn(b * heads * t, 10, 2.0f);
  la[1] = -inf;
  lb[2] = -inf;
  la[3] = lb[3] = -inf;
  la[4] = 300.0f;
  lb[4] = 299.0f;
  Tensor lse = g.cpu({b, heads, t}, la), glse = g.gpu(lse);
  const Tensor block_lse = g.cpu({b, heads, t}, lb);
  const Tensor gblock_lse = g.gpu(block_lse);
  ops::attention_merge(out, lse, block_out, block_lse);
  ops::attention_merge(gout, glse, gblock_out, gblock_lse);
  require_close(gout, out, "merged out");
  require_scores_close(g, glse, lse);
}

TEST_CASE("gpu copy_columns gives the cpu's bits, copying and adding", "[gpu][ring]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  auto [src, gsrc] = g.pair({7, 3, 30}, 11);
  auto [dst, gdst] = g.pair({7, 3, 18}, 12);
  ops::copy_columns(dst, 2, src, 5, 11);
  ops::copy_columns(gdst, 2, gsrc, 5, 11);
  require_same_bits(gdst, dst, "copy_columns");
  ops::copy_columns(dst, 0, src, 19, 9, /*add=*/true);
  ops::copy_columns(gdst, 0, gsrc, 19, 9, /*add=*/true);
  require_same_bits(gdst, dst, "copy_columns add");
}

TEST_CASE("gpu gather, combine and gathered dots give the cpu's bits", "[gpu][moe]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  const int64_t table_rows = 9, c = 37, n = 20;
  // repeated indices (several slots per token) and rows no slot lands on
  std::vector<int32_t> index(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) index[size_t(i)] = int32_t((i * 5 + i / 3) % (table_rows - 2));
  const std::vector<float> scale = GpuRank::randn(n, 13, 1.0f);
  auto [table, gtable] = g.pair({table_rows, c}, 14);
  for (bool scaled : {false, true}) {
    INFO((scaled ? "with scales" : "without scales"));
    const std::vector<float> s = scaled ? scale : std::vector<float>{};
    Tensor rows = g.cpu_zeros({n, c}), grows = g.gpu(rows);
    ops::gather_rows(rows, table, index, s);
    ops::gather_rows(grows, gtable, index, s);
    require_same_bits(grows, rows, "gather_rows");
    // combine overwrites: start from non-zero outputs
    auto [out, gout] = g.pair({table_rows, c}, 15);
    ops::combine_rows(out, rows, index, s);
    ops::combine_rows(gout, grows, index, s);
    require_same_bits(gout, out, "combine_rows");
    std::vector<float> dots(static_cast<size_t>(n)), gdots(static_cast<size_t>(n));
    ops::gathered_row_dots(dots, table, index, rows);
    ops::gathered_row_dots(gdots, gtable, index, grows);
    CHECK(std::memcmp(dots.data(), gdots.data(), dots.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("gpu combine adds each row's slots in ascending order, the same on every run",
          "[gpu][moe]") {
  MGPU_REQUIRE_GPU();
  GpuRank g;
  // 1e8 + 1 rounds to 1e8: in ascending order row 0 is 0; adding the 1 last would give 1
  const Tensor rows = g.gpu(g.cpu({4, 1}, {1e8f, 1.0f, 7.0f, -1e8f}));
  const std::vector<int32_t> index = {0, 0, 1, 0};
  Tensor out = g.gpu(g.cpu_zeros({2, 1}));
  for (int run = 0; run < 3; ++run) {
    ops::combine_rows(out, rows, index);
    CHECK(out.to_vector() == std::vector<float>{0.0f, 7.0f});
  }
}

TEST_CASE("an MoE GPT forward/backward on the GPU matches the CPU (same weights, same batch)",
          "[gpu][moe]") {
  MGPU_REQUIRE_GPU();
  GPTConfig cfg = gpu_test::small_gpt_config();  // vocab 97, 2 layers, 4 heads, seed 7
  cfg.seq_len = 16;
  cfg.dim = 32;
  cfg.experts = 4;
  cfg.top_k = 2;
  cfg.route = &reference::route_tokens;
  // The router's top-k picks from probabilities computed on either side: a pick that flipped on
  // a near tie would send a token to another expert and show as a large difference here.
  gpu_test::require_gpt_matches_cpu(cfg, 3, 40);
}

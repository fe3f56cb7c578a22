// Tensor parallelism: on 1, 2, 3 and 4 ranks it trains to the single-device parameters (and the
// same AdamW state) when its shards are mapped into the full model; one step communicates exactly
// 4 all-reduces of B*T*C elements per layer in the tp group; f and g are conjugate (their pair
// reproduces the unsharded MLP's outputs and gradients); bad tp sizes are one clear line.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/selected_seams.h"
#include "common/single_device_reference.h"
#include "core/data/task.h"
#include "core/ops/ops.h"
#include "core/parallel/mesh.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/vocab_parallel.h"
#include "core/world/world.h"
#include "exercises/selection.h"

namespace test_tensor_parallel {

using namespace mgpu;
using namespace mgpu::parallel;

namespace {
constexpr int kSteps = 4, kBatch = 4, kSeq = 8;

GPTConfig small_model(const data::Task& task) {
  GPTConfig cfg;
  cfg.vocab = task.vocab_size();
  cfg.seq_len = kSeq;
  cfg.layers = 2;
  cfg.dim = 48;
  cfg.heads = 12;  // 12 heads and 192 hidden units divide over 1, 2, 3, 4 ranks
  return cfg;
}

std::unique_ptr<optim::Optimizer> adamw(const ParamList& params) {
  optim::AdamWOptions o;
  o.lr = 3e-3f;
  o.weight_decay = 0.0f;
  return std::make_unique<optim::AdamW>(params, o);
}

using testing::FullTensors;

// Single device: parameters and optimizer state after kSteps.
FullTensors train_single_device(const GPTConfig& cfg, const data::Task& task) {
  return testing::train_single_device_reference(cfg, task, adamw, kSteps, kBatch, kSeq);
}

// Tensor parallel over `tp` ranks: every writer's shard placed into full tensors; `covered`
// counts how often each element was written (must be exactly once).
FullTensors train_tensor_parallel(const GPTConfig& cfg, const data::Task& task, int tp,
                                  std::map<std::string, std::vector<int>>& covered,
                                  bool vocab_parallel_head = false) {
  FullTensors full;
  std::vector<std::string> short_runs;  // shards whose runs do not add up to the local tensor
  std::mutex mutex;
  World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto layout =
        tensor_parallel(cfg, *ctx.comm, adamw, ex::selected_seams().tp, vocab_parallel_head);
    for (int step = 0; step < kSteps; ++step) layout->step(task.sample(step, kBatch, kSeq), step);
    std::lock_guard lock(mutex);
    for (const train::TensorShard& s : layout->shards()) {
      if (!s.writer) continue;
      int64_t numel = 1;
      for (int64_t d : s.full_shape) numel *= d;
      auto& dst = full[s.full_name];
      auto& count = covered[s.full_name];
      dst.resize(static_cast<size_t>(numel));
      count.resize(static_cast<size_t>(numel));
      const std::vector<float> local = s.local.to_vector();
      int64_t pos = 0;
      for (const train::ShardRun& run : s.runs)
        for (int64_t i = 0; i < run.length; ++i) {
          dst[static_cast<size_t>(run.full_offset + i)] = local[static_cast<size_t>(pos++)];
          count[static_cast<size_t>(run.full_offset + i)]++;
        }
      if (pos != static_cast<int64_t>(local.size())) short_runs.push_back(s.full_name);
    }
  });
  // Checked here, not in the rank threads: Catch2 is not thread-safe.
  CHECK(short_runs == std::vector<std::string>{});
  return full;
}
// Every parameter and every AdamW moment of `got` is the single-device one, each element written
// by exactly one rank. Rounding only: the all-reduce sums partial products in another order
// (~1e-7 relative), and the GEMM kernels OpenBLAS picks for the CPU set the order of both runs'
// sums. Where a gradient nearly cancels (|g| ~ AdamW's eps, 1e-8), AdamW turns its absolute
// rounding d into lr * d / eps per step: with lr 3e-3 and d ~ 1e-10, a few 1e-5 after 4 steps.
// Measured: under 2e-5 with OpenBLAS's Haswell and Zen kernels, 2.0e-5 with its AVX-512 ones
// (SkylakeX, Cooperlake). A wrong shard is off by whole updates (lr per step), 60x the bound.
constexpr float kAdamWParity = 5e-5f;
void check_single_device(const FullTensors& got, const FullTensors& reference,
                         const std::map<std::string, std::vector<int>>& covered) {
  REQUIRE(got.size() == reference.size());
  for (const auto& [name, want] : reference) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    const std::vector<float>& have = got.at(name);
    REQUIRE(have.size() == want.size());
    for (int c : covered.at(name)) REQUIRE(c == 1);
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(have[i] - want[i]));
    CHECK(worst < kAdamWParity);
  }
}
}  // namespace

TEST_CASE("tensor parallelism trains to the single-device parameters", "[tp][equivalence]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  const FullTensors reference = train_single_device(cfg, *task);
  for (int tp : {1, 2, 3, 4}) {
    INFO("tp = " << tp);
    std::map<std::string, std::vector<int>> covered;
    const FullTensors got = train_tensor_parallel(cfg, *task, tp, covered);
    check_single_device(got, reference, covered);
  }
}

TEST_CASE("one tensor-parallel step: 4 all-reduces of B*T*C per layer in the tp group",
          "[tp][trace]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  for (int tp : {2, 4}) {
    World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
    world.run([&](RankContext& ctx) {
      Mesh mesh(*ctx.comm, {.tp = tp});
      auto layout = tensor_parallel(cfg, mesh.group(Axis::tp), adamw, ex::selected_seams().tp);
      StepScope scope(0);
      layout->step(task->sample(0, kBatch, kSeq), 0);
    });
    const trace::Trace trace = world.collect_trace();
    for (int rank = 0; rank < tp; ++rank) {
      int all_reduces = 0, others = 0;
      for (const trace::Event& e : trace.events) {
        if (e.rank != rank || e.lane != trace::Lane::comm || e.group != "tp0") continue;
        if (e.op == "all_reduce") {
          ++all_reduces;
          CHECK(e.bytes == int64_t{kBatch} * kSeq * cfg.dim * 4);
        } else {
          ++others;
        }
      }
      CHECK(all_reduces == 4 * cfg.layers);
      CHECK(others == 0);
    }
  }
}

// The MLP pair column(fc) -> row(proj) on 2 ranks against the unsharded pair: f's backward and
// g's forward are exactly what makes the outputs and every gradient match.
TEST_CASE("f and g: a column-parallel then row-parallel pair is the unsharded pair", "[tp][fg]") {
  const int64_t b = 2, t = 3, in = 4, hidden = 8, out = 4, tp = 2;
  auto values = [](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.7f * float(i) + scale);
    return v;
  };
  const auto x = values(b * t * in, 1.0f), w1 = values(hidden * in, 0.5f),
             b1 = values(hidden, 0.3f), w2 = values(out * hidden, 0.4f), b2 = values(out, 0.2f),
             dy = values(b * t * out, 0.9f);
  // Unsharded reference.
  std::vector<float> want_y, want_dx, want_dw1, want_dw2, want_db2;
  World one(WorldOptions{.ranks = 1, .all_reduce = selected_all_reduce()});
  one.run([&](RankContext&) {
    Tensor X = Tensor::from({b, t, in}, x), W1 = Tensor::from({hidden, in}, w1),
           B1 = Tensor::from({hidden}, b1), W2 = Tensor::from({out, hidden}, w2),
           B2 = Tensor::from({out}, b2), DY = Tensor::from({b, t, out}, dy);
    Tensor H = Tensor::zeros({b, t, hidden}, MemCategory::activations);
    Tensor Y = Tensor::zeros({b, t, out}, MemCategory::activations);
    ops::linear_forward(H, X, W1, B1);
    ops::linear_forward(Y, H, W2, B2);
    Tensor DH = Tensor::zeros(H.shape(), MemCategory::workspace);
    Tensor DX = Tensor::zeros(X.shape(), MemCategory::workspace);
    Tensor DW1 = Tensor::zeros(W1.shape(), MemCategory::gradients),
           DB1 = Tensor::zeros(B1.shape(), MemCategory::gradients);
    Tensor DW2 = Tensor::zeros(W2.shape(), MemCategory::gradients),
           DB2 = Tensor::zeros(B2.shape(), MemCategory::gradients);
    ops::linear_backward(DH, DW2, DB2, DY, H, W2);
    ops::linear_backward(DX, DW1, DB1, DH, X, W1);
    want_y = Y.to_vector(), want_dx = DX.to_vector(), want_dw1 = DW1.to_vector();
    want_dw2 = DW2.to_vector(), want_db2 = DB2.to_vector();
  });
  // Per rank: (what the rank computed, its share of the unsharded result).
  std::vector<std::vector<std::pair<std::vector<float>, std::vector<float>>>> compared(
      static_cast<size_t>(tp));
  World world(WorldOptions{.ranks = static_cast<int>(tp), .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    comm::Comm& group = *ctx.comm;
    const int64_t r = group.rank(), h0 = r * hidden / tp, h1 = (r + 1) * hidden / tp;
    Tensor X = Tensor::from({b, t, in}, x), Bias2 = Tensor::from({out}, b2);
    Tensor W1 = Tensor::from({hidden, in}, w1).rows(h0, h1);  // column-parallel: my rows
    Tensor B1 = Tensor::from({hidden}, b1).rows(h0, h1);
    std::vector<float> w2_cols;  // row-parallel: my columns
    for (int64_t o = 0; o < out; ++o)
      for (int64_t h = h0; h < h1; ++h) w2_cols.push_back(w2[static_cast<size_t>(o * hidden + h)]);
    Tensor W2 = Tensor::from({out, h1 - h0}, w2_cols);
    Tensor H = Tensor::zeros({b, t, h1 - h0}, MemCategory::activations);
    Tensor Y = Tensor::zeros({b, t, out}, MemCategory::activations);
    // forward: f then the column linear; the row linear then g
    Tensor input = X;
    f_forward(input, group);
    ops::linear_forward(H, input, W1, B1);
    ops::linear_forward(Y, H, W2, r == 0 ? Bias2 : Tensor());
    g_forward(Y, group);
    // backward
    Tensor DY = Tensor::from({b, t, out}, dy);
    g_backward(DY, group);
    Tensor DH = Tensor::zeros(H.shape(), MemCategory::workspace);
    Tensor DX = Tensor::zeros(X.shape(), MemCategory::workspace);
    Tensor DW1 = Tensor::zeros(W1.shape(), MemCategory::gradients),
           DB1 = Tensor::zeros(B1.shape(), MemCategory::gradients);
    Tensor DW2 = Tensor::zeros(W2.shape(), MemCategory::gradients),
           DB2 = Tensor::zeros({out}, MemCategory::gradients);
    ops::linear_backward(DH, DW2, DB2, DY, H, W2);
    ops::linear_backward(DX, DW1, DB1, DH, input, W1);
    f_backward(DX, group);

    // Compared on the main thread after the run (Catch2 is not thread-safe).
    auto close = [&](const std::vector<float>& a, const std::vector<float>& e) {
      compared[static_cast<size_t>(r)].emplace_back(a, e);
    };
    close(Y.to_vector(), want_y);      // g's forward sums the partial products (+ bias once)
    close(DX.to_vector(), want_dx);    // f's backward sums my columns' share of dx
    close(DB2.to_vector(), want_db2);  // the row bias gradient is whole on every rank
    std::vector<float> dw1_rows(want_dw1.begin() + h0 * in, want_dw1.begin() + h1 * in);
    close(DW1.to_vector(), dw1_rows);
    std::vector<float> dw2_cols;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t h = h0; h < h1; ++h)
        dw2_cols.push_back(want_dw2[static_cast<size_t>(o * hidden + h)]);
    close(DW2.to_vector(), dw2_cols);
  });
  for (size_t r = 0; r < compared.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(compared[r].size() == 5);
    for (const auto& [a, e] : compared[r]) {
      REQUIRE(a.size() == e.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(e[i]).margin(1e-5));
    }
  }
}

TEST_CASE("a tp size that does not divide the heads or 4*dim is one clear line", "[tp]") {
  GPTConfig cfg;
  cfg.dim = 48;
  cfg.heads = 6;
  CHECK_THROWS_WITH(check_tp_size(cfg, 4),
                    "tensor parallelism over 4 ranks needs 4 to divide the heads (6) and the MLP "
                    "width 4*dim (192): use 1, 2, 3, 6 ranks (or change --heads)");
  CHECK_NOTHROW(check_tp_size(cfg, 3));
  CHECK_THROWS_AS(check_tp_size(cfg, 0), std::invalid_argument);
}

TEST_CASE("the vocabulary-parallel head trains to the single-device parameters",
          "[tp][vocab][equivalence]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  const FullTensors reference = train_single_device(cfg, *task);
  for (int tp : {2, 4}) {
    INFO("tp = " << tp << ", vocab " << cfg.vocab);
    REQUIRE(cfg.vocab % tp == 0);
    std::map<std::string, std::vector<int>> covered;
    const FullTensors got = train_tensor_parallel(cfg, *task, tp, covered, true);
    // The head's matrix is split over the vocabulary: each row written by exactly one rank, so
    // the checkpoint holds the single-device [V, C] matrix.
    REQUIRE(covered.count("head.lm_head.weight") == 1);
    check_single_device(got, reference, covered);
  }
}

TEST_CASE("the vocabulary-parallel head: its shard is rows of lm_head; bad setups are one line",
          "[tp][vocab]") {
  GPTConfig cfg;
  cfg.vocab = 10;
  GPT model(cfg, BlockShard::whole(cfg));
  split_head(model.head, cfg, 2, 1);
  CHECK(model.head.lm_head.weight.spec.split());
  CHECK_THROWS_WITH(
      check_vocab_parallel(cfg, 4),
      Catch::Contains("4 to divide the vocabulary (10)") && Catch::Contains("multiple of 4"));
  cfg.tie_embeddings = true;
  CHECK_THROWS_WITH(check_vocab_parallel(cfg, 2), Catch::Contains("tied embeddings"));
}

}  // namespace test_tensor_parallel

// The pipeline executor runs real training: every schedule must reach the single-device
// parameters, and in theory mode (fixed time per F and B, equal stages) the measured bubbles and
// activation peaks must be exactly what the formulas say.
//
// Tolerance of the equivalence tests: the pipeline sums the micro-batch gradients (each scaled by
// 1/M) where the single device averages the whole batch in one pass, so fp32 sums run in another
// order; after 3 SGD steps parameters agree to ~1e-6 relative. We check 1e-5 relative (+1e-6
// absolute for values near 0). SGD keeps the comparison linear (AdamW divides by sqrt(v), which
// amplifies rounding in near-zero gradients).
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "core/parallel/pipeline/simulate.h"
#include "core/theory/pipeline_bubbles.h"
#include "lessons/pipeline.h"
#include "lessons/training.h"

namespace test_pipeline_executor {

using namespace mgpu;
using namespace mgpu::lessons;

namespace {

CommonOptions tiny(int ranks, int layers, int batch, int steps = 3) {
  CommonOptions c;
  c.ranks = ranks;
  c.layers = layers;
  c.dim = 16;
  c.heads = 2;
  c.seq = 8;
  c.batch = batch;
  c.steps = steps;
  c.optimizer = "sgd";
  c.lr = 0.1;
  c.quiet = true;
  return c;
}

// The baseline: one device, the whole batch per step.
std::map<std::string, std::vector<float>> single_device_params(const CommonOptions& c,
                                                               std::vector<float>& losses) {
  auto task = make_task(c);
  GPT model(model_config(c, *task));
  auto opt = make_optimizer(c, model.params());
  for (int step = 0; step < c.steps; ++step) {
    data::Batch batch = task->sample(step, c.batch, c.seq);
    model.zero_grad();
    losses.push_back(model.forward_backward(batch.tokens, batch.targets, batch.B, batch.T));
    opt->step();
  }
  std::map<std::string, std::vector<float>> params;
  for (Param* p : model.params()) params[p->name] = p->data.to_vector();
  return params;
}

}  // namespace

TEST_CASE("every executed schedule trains to the single-device parameters", "[pipeline]") {
  struct Case {
    std::string schedule;
    int stages, microbatches, virtual_stages, layers, batch;
  };
  const std::vector<Case> cases = {
      {"naive", 2, 1, 1, 2, 4},
      {"naive", 3, 1, 1, 5, 4},  // 3 stages over 5 layers: 2,2,1
      {"gpipe", 2, 2, 1, 2, 4},
      {"gpipe", 3, 4, 1, 5, 8},
      {"1f1b", 4, 8, 1, 4, 8},
      {"1f1b", 3, 2, 1, 5, 4},  // M < P
      {"interleaved", 2, 4, 2, 4, 8},
      {"interleaved", 2, 2, 2, 5, 4},  // uneven chunks
      {"interleaved", 3, 3, 2, 7, 6},
      {"interleaved", 2, 3, 2, 4, 6},  // M % P != 0
      {"interleaved", 3, 5, 2, 6, 10},
      {"zb-h1", 2, 4, 1, 2, 4},
      {"zb-h1", 3, 4, 1, 5, 8},
      {"zb-h1", 4, 2, 1, 4, 4},
      // The V schedules bring their own 2 chunks per stage (virtual_stages stays 1).
      {"zbv", 2, 3, 1, 4, 6},
      {"zbv", 3, 6, 1, 7, 6},  // 7 layers: uneven chunks
      {"dualpipev", 2, 4, 1, 4, 8},
      {"dualpipev", 3, 6, 1, 6, 6},
      // DualPipe: two copies, half the micro-batches each way; 6 layers in 4 parts: 2,2,1,1.
      {"dualpipe", 2, 4, 1, 2, 8},
      {"dualpipe", 4, 8, 1, 6, 8},
  };
  for (const Case& k : cases) {
    CAPTURE(k.schedule, k.stages, k.microbatches, k.virtual_stages, k.layers);
    CommonOptions c = tiny(k.stages, k.layers, k.batch);
    std::vector<float> expected_losses;
    auto expected = single_device_params(c, expected_losses);
    std::ostringstream out;
    PipelineResult r =
        train_pipeline(c, {k.schedule, k.stages, k.microbatches, k.virtual_stages}, out);
    REQUIRE(r.params.size() == expected.size());
    REQUIRE(r.losses.size() == expected_losses.size());
    for (size_t i = 0; i < r.losses.size(); ++i)
      CHECK(r.losses[i] == Approx(expected_losses[i]).epsilon(1e-5));
    double worst = 0;
    for (auto& [name, want] : expected) {
      const auto& got = r.params.at(name);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i)
        worst =
            std::max(worst, std::abs(double(got[i]) - want[i]) / (1e-5 * std::abs(want[i]) + 1e-6));
    }
    CHECK(worst <= 1.0);  // |got - want| <= 1e-5 |want| + 1e-6 everywhere
  }
}

TEST_CASE("theory mode: measured bubble equals the formula for GPipe and 1F1B", "[pipeline]") {
  for (int P : {2, 3, 4})
    for (int M : {1, 2, 4, 8})
      for (std::string schedule : {"gpipe", "1f1b"}) {
        std::ostringstream sink;
        CAPTURE(P, M, schedule);
        CommonOptions c = tiny(P, P, M, 2);
        PipelineResult r = train_pipeline(c, {schedule, P, M, 1, /*theory=*/true}, sink);
        const double theory = double(P - 1) / (M + P - 1);
        REQUIRE(r.theory_bubble == Approx(theory).margin(1e-12));
        for (double measured : r.measured_bubble) CHECK(std::abs(measured - theory) < 1e-9);
      }
}

TEST_CASE("theory mode: interleaving shrinks the bubble exactly as predicted", "[pipeline]") {
  // M % P != 0 too ({2, 3, 2}, {3, 5, 2}, {4, 6, 3}): rounds of at least P micro-batches.
  const std::vector<std::array<int, 3>> grid = {{2, 2, 2}, {2, 4, 2}, {4, 4, 2}, {4, 8, 2},
                                                {2, 4, 3}, {2, 3, 2}, {3, 5, 2}, {4, 6, 3}};
  for (auto [P, M, V] : grid) {
    CAPTURE(P, M, V);
    std::ostringstream out;
    PipelineResult inter =
        train_pipeline(tiny(P, P * V, M, 2), {"interleaved", P, M, V, true}, out);
    PipelineResult plain = train_pipeline(tiny(P, P * V, M, 2), {"1f1b", P, M, 1, true}, out);
    const double theory = double(P - 1) / (V * M + P - 1);
    for (int s = 0; s < P; ++s) {
      CHECK(std::abs(inter.measured_bubble[s] - theory) < 1e-9);
      CHECK(inter.measured_bubble[s] < plain.measured_bubble[s]);
    }
  }
}

TEST_CASE("activation memory: GPipe holds M micro-batches, 1F1B at most P - s", "[pipeline]") {
  const int P = 3, M = 6;
  std::ostringstream out;
  PipelineResult gpipe = train_pipeline(tiny(P, P, M, 1), {"gpipe", P, M, 1, true}, out);
  PipelineResult ofob = train_pipeline(tiny(P, P, M, 1), {"1f1b", P, M, 1, true}, out);
  for (int s = 0; s < P; ++s) {
    CAPTURE(s);
    const auto& g = gpipe.last_step[s];
    const auto& o = ofob.last_step[s];
    CHECK(g.peak_stashed == M);
    CHECK(o.peak_stashed == P - s);
    CHECK(g.peak_stashed == gpipe.expected_peak[s]);
    CHECK(o.peak_stashed == ofob.expected_peak[s]);
    // Exact bytes: one micro-batch's activation set on this stage, times the count.
    CHECK(g.stash_bytes == o.stash_bytes);
    CHECK(g.peak_activation_bytes == int64_t(M) * g.stash_bytes);
    CHECK(o.peak_activation_bytes == int64_t(P - s) * o.stash_bytes);
    CHECK(o.peak_activation_bytes < g.peak_activation_bytes);
  }
}

TEST_CASE("theory mode: ZB-H1's split backward fills the drain as predicted", "[pipeline]") {
  // F = B = W: the formula 1 - 3M/(3M+P-1+max(0,P-M)); below 1F1B's bubble.
  for (int P : {2, 3, 4})
    for (int M : {1, 2, 4, 8}) {
      CAPTURE(P, M);
      std::ostringstream out;
      PipelineResult zb = train_pipeline(tiny(P, P, M, 2), {"zb-h1", P, M, 1, true}, out);
      const double theory = 1.0 - 3.0 * M / (3.0 * M + P - 1 + std::max(0, P - M));
      for (int s = 0; s < P; ++s) {
        CHECK(std::abs(zb.measured_bubble[s] - theory) < 1e-9);
        CHECK(zb.last_step[s].peak_stashed == zb.expected_peak[s]);  // F minus B, as 1F1B
      }
      CHECK(theory < double(P - 1) / (M + P - 1));
    }
}

TEST_CASE("theory mode: the executor measures the V schedules' closed-form bubbles", "[pipeline]") {
  for (std::string name : {"zbv", "dualpipev"})
    for (auto [P, M] : std::vector<std::pair<int, int>>{{2, 4}, {3, 6}, {4, 8}}) {
      CAPTURE(name, P, M);
      std::ostringstream sink;
      PipelineResult r =
          train_pipeline(tiny(P, 2 * P, M, 2), {name, P, M, 1, /*theory=*/true}, sink);
      const theory::ChunkCosts chunk{0.5, 1, 0.5};
      const double bubble =
          name == "zbv" ? theory::bubble_zbv(P, chunk) : theory::bubble_dualpipe(2 * P, chunk);
      const double theory = bubble / (bubble + 3.0 * M);
      CHECK(r.theory_bubble == Approx(theory).margin(1e-12));
      for (double measured : r.measured_bubble) CHECK(std::abs(measured - theory) < 1e-9);
      const int expected_peak = name == "zbv" ? 2 * P : 2 * P + 1;
      for (const auto& st : r.last_step) CHECK(st.peak_stashed == expected_peak);
    }
}

TEST_CASE("theory mode: the executor measures DualPipe's closed-form bubble", "[pipeline]") {
  for (auto [P, M] : std::vector<std::pair<int, int>>{{2, 4}, {4, 8}, {4, 12}, {6, 12}}) {
    CAPTURE(P, M);
    std::ostringstream sink;
    PipelineResult r = train_pipeline(tiny(P, P, M, 2), {"dualpipe", P, M, 1, true}, sink);
    // A chunk is a whole stage of one copy (F 1, B 2, W 1); every stage runs M of them.
    const double bubble = theory::bubble_dualpipe(P, {1, 2, 1});
    const double theory = bubble / (bubble + 3.0 * M);
    CHECK(r.theory_bubble == Approx(theory).margin(1e-12));
    for (double measured : r.measured_bubble) CHECK(std::abs(measured - theory) < 1e-9);
    for (const auto& st : r.last_step) CHECK(st.peak_stashed == theory::peak_chunks_dualpipe(P));
    // Two copies: every stage holds the parameters of two stages.
    int64_t held = 0;
    for (int64_t n : r.param_elements) held += n;
    CHECK(held == 2 * r.model_params);
  }
}

TEST_CASE("V schedules train to 1F1B's parameters bit for bit, with and without recompute",
          "[pipeline][recompute]") {
  for (std::string precision : {"fp32", "bf16"})
    for (std::string name : {"zbv", "dualpipev"}) {
      CAPTURE(precision, name);
      CommonOptions c = tiny(2, 4, 8, 2);
      c.precision = precision;
      c.optimizer = "adamw";  // bf16 needs fp32 master weights; bit-identity holds for any
      std::ostringstream sink;
      const auto base = train_pipeline(c, {"1f1b", 2, 4, 1}, sink).params;
      REQUIRE(!base.empty());
      CHECK(train_pipeline(c, {name, 2, 4, 1}, sink).params == base);
      for (std::string mode : {"selective", "full"}) {
        c.recompute = mode;
        CHECK(train_pipeline(c, {name, 2, 4, 1}, sink).params == base);
      }
    }
}

}  // namespace test_pipeline_executor

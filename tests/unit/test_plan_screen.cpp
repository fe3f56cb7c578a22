// The planner's screen and refinement (core/plan/screen.cpp, refine.cpp) against the simulator:
// the screen's memory is a lower bound of the simulated peak, so no layout it rejects could fit;
// with more replicas at the same work per replica the best step found is never slower than the
// smaller cluster's best with the added data-parallel reduction; and the search over V.
#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/model/presets.h"
#include "core/plan/search.h"
#include "exercises/exercises.h"

namespace test_plan_screen {

using namespace mgpu;
using namespace mgpu::plan;

namespace {

Workload workload(const GPTConfig& m) {
  return {.model = m, .seams = reference::seams().hybrid()};
}

GPTConfig preset(const std::string& name) {
  const ModelPreset* p = find_model_preset(name);
  REQUIRE(p != nullptr);
  GPTConfig m;
  m.layers = p->layers;
  m.dim = p->dim;
  m.heads = p->heads;
  m.seq_len = p->seq;
  m.vocab = p->vocab;
  m.tie_embeddings = p->tie_embeddings;
  return m;
}

// A random small model: dense or with experts, tied or not, its sizes from short lists that mix
// the regimes (vocabulary-heavy, activation-heavy, weight-heavy).
GPTConfig random_model(std::mt19937& rng) {
  auto pick = [&](std::vector<int> values) { return values[rng() % values.size()]; };
  GPTConfig m;
  m.layers = pick({2, 4, 8, 12});
  m.heads = pick({2, 4, 8});
  m.dim = m.heads * pick({16, 32, 64});
  m.seq_len = pick({32, 64, 128, 256});
  m.vocab = pick({64, 256, 1000, 5000});
  m.tie_embeddings = rng() % 2 == 1;
  if (rng() % 4 == 0) {
    m.experts = pick({2, 4});
    m.top_k = pick({1, 2});
    m.moe_every = pick({1, 2});
  }
  return m;
}

}  // namespace

TEST_CASE("plan's screen memory is a lower bound of the simulated peak: what it drops cannot fit",
          "[plan][property]") {
  std::mt19937 rng(20261129);
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  auto pick = [&](std::vector<int> values) { return values[rng() % values.size()]; };
  const char* precisions[] = {"fp32", "bf16", "fp16"};
  int checked = 0, experts = 0, pipelines = 0, dropped = 0;
  for (int c = 0; c < 160; ++c) {
    const GPTConfig m = random_model(rng);
    const int gpus = pick({1, 2, 4, 8, 16});
    Pins pins;
    pins.precisions = {precisions[rng() % 3]};
    if (rng() % 3 == 0)
      pins.recompute = std::vector<std::string>{"none", "selective", "full"}[rng() % 3];
    if (rng() % 3 == 0) pins.zero = pick({0, 1, 2, 3});
    std::vector<Layout> layouts;
    try {
      layouts = enumerate_layouts(m, gpus, gpus * pick({1, 2, 4, 8}), pins);
    } catch (const std::invalid_argument&) {
      continue;  // no layout of this model on these GPUs with these pins
    }
    std::shuffle(layouts.begin(), layouts.end(), rng);
    layouts.resize(std::min<size_t>(layouts.size(), 6));
    for (const Layout& l : layouts) {
      Prediction p;
      try {
        p = simulate(workload(m), l, h100);
      } catch (const std::invalid_argument&) {
        continue;  // the engine refuses it: the search skips it too
      }
      const int64_t screen = screen_layout(m, l, h100).memory_bytes;
      INFO(describe(l) << " of " << m.layers << " layers, dim " << m.dim << ", seq " << m.seq_len
                       << ", vocab " << m.vocab << ", experts " << m.experts);
      CHECK(screen <= p.memory_peak_total);
      // Any capacity between the two: the screen drops the layout, and it does not fit.
      if (screen > 0 && screen < p.memory_peak_total) ++dropped;
      ++checked;
      experts += m.experts > 0 ? 1 : 0;
      pipelines += l.pp > 1 ? 1 : 0;
    }
  }
  // The sample covers what it claims to: hundreds of layouts, with experts and pipelines among
  // them.
  CHECK(checked > 500);
  CHECK(experts > 50);
  CHECK(pipelines > 100);
  CHECK(dropped > 0);
}

TEST_CASE("plan's screen bound is tight at scale: GPT-3 175B within 10% of the simulated peak",
          "[plan]") {
  const GPTConfig m = preset("gpt3-175b");
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  for (const char* recompute : {"none", "selective", "full"}) {
    Layout l{.dp = 8,
             .tp = 4,
             .pp = 8,
             .microbatch_size = 1,
             .microbatches = 64,
             .schedule = "interleaved",
             .virtual_stages = 2,
             .zero = 1,
             .recompute = recompute};
    l = with_megatron_choices(m, l);
    const double peak = static_cast<double>(simulate(workload(m), l, h100).memory_peak_total);
    const double screen = static_cast<double>(screen_layout(m, l, h100).memory_bytes);
    INFO(recompute << ": screen " << screen / (1 << 30) << " GiB, simulated " << peak / (1 << 30));
    CHECK(screen <= peak);
    // Within 1% where the peak is the activations' (none, selective); full recompute peaks in
    // ZeRO's gradient sync, whose transient buffers the bound leaves out (5% there).
    CHECK(screen > 0.9 * peak);
  }
}

namespace {

// The best step of `model` on `gpus` GPUs at `per_gpu` sequences per GPU, and the step of that
// layout with twice the replicas (the same work per replica, plus the larger dp reduction).
struct Scaled {
  Simulated best;
  double doubled_step = 0, best_at_twice = 0;
};

Scaled best_then_twice(const GPTConfig& model, int gpus, int per_gpu, const Pins& pins) {
  SearchRequest r;
  r.workload = workload(model);
  r.profile = HardwareProfile::load("DGX-H100");
  r.gpus = gpus;
  r.global_batch = per_gpu * gpus;
  r.pins = pins;
  const SearchResult small = search(r);
  REQUIRE(!small.ranked.empty());
  Scaled s{.best = small.ranked[0]};
  Layout doubled = s.best.layout;
  doubled.dp *= 2;
  s.doubled_step = simulate(r.workload, doubled, r.profile).step_seconds;
  r.gpus *= 2;
  r.global_batch *= 2;
  const SearchResult large = search(r);
  REQUIRE(!large.ranked.empty());
  s.best_at_twice = large.ranked[0].prediction.step_seconds;
  return s;
}

}  // namespace

// Issue #52's case: GPT-3 175B on DGX-H100 pinned as published runs state it (TP 4, PP 8,
// micro-batch 1, interleaved, bf16) at 2 sequences per GPU. With the old screen the 256-GPU search
// never simulated selective recompute (its memory formula over-counted) and its best was 29%
// slower than at 128 GPUs.
TEST_CASE("plan: GPT-3 175B on 256 GPUs is no slower than on 128 plus the added all-reduce",
          "[plan]") {
  Pins pins;
  pins.tp = 4;
  pins.pp = 8;
  pins.microbatch_size = 1;
  pins.schedule = "interleaved";
  pins.precisions = {"bf16"};
  const Scaled s = best_then_twice(preset("gpt3-175b"), 128, 2, pins);
  INFO("128 GPUs: " << describe(s.best.layout) << " " << s.best.prediction.step_seconds
                    << " s; with dp doubled " << s.doubled_step << " s; 256 GPUs' best "
                    << s.best_at_twice << " s");
  CHECK(s.best_at_twice <= s.doubled_step);
  // The added reduction is small next to the step (ZeRO-1's reduce-scatter and all-gather over
  // 8 replicas instead of 4, across nodes).
  CHECK(s.doubled_step < 1.05 * s.best.prediction.step_seconds);
}

TEST_CASE("plan: more replicas at the same work per replica never find a slower best", "[plan]") {
  struct Case {
    const char* model;
    int gpus, per_gpu;
  };
  for (const Case& c : {Case{"gpt2-xl", 8, 8}, Case{"gpt2-xl", 16, 4}, Case{"gpt3-2.7b", 16, 8},
                        Case{"gpt3-6.7b", 16, 4}, Case{"gpt3-6.7b", 32, 2}}) {
    const Scaled s = best_then_twice(preset(c.model), c.gpus, c.per_gpu, Pins{});
    INFO(c.model << " on " << c.gpus << " GPUs: " << describe(s.best.layout) << " "
                 << s.best.prediction.step_seconds << " s; with dp doubled " << s.doubled_step
                 << " s; best on " << 2 * c.gpus << ": " << s.best_at_twice << " s");
    CHECK(s.best_at_twice <= s.doubled_step);
  }
}

TEST_CASE("plan searches the virtual-stage count: the 175B case picks a V the layers allow",
          "[plan]") {
  SearchRequest r;
  r.workload = workload(preset("gpt3-175b"));
  r.profile = HardwareProfile::load("DGX-H100");
  r.gpus = 128;
  r.global_batch = 256;
  r.pins.tp = 4;
  r.pins.pp = 8;
  r.pins.microbatch_size = 1;
  r.pins.schedule = "interleaved";
  r.pins.recompute = "selective";
  r.pins.precisions = {"bf16"};
  const SearchResult result = search(r);
  REQUIRE(!result.ranked.empty());
  std::set<int> simulated_v;
  for (const Simulated& s : result.ranked) simulated_v.insert(s.layout.virtual_stages);
  for (const Simulated& s : result.rejected) simulated_v.insert(s.layout.virtual_stages);
  // 96 layers over 8 stages: V in {2, 3, 4, 6, 12}; more than one of them was simulated, and the
  // fastest is not slower than V = 2 simulated on its own.
  CHECK(simulated_v.size() > 1);
  for (int v : simulated_v) CHECK(96 % (8 * v) == 0);
  Layout v2 = result.ranked[0].layout;
  v2.virtual_stages = 2;
  CHECK(result.ranked[0].prediction.step_seconds <=
        simulate(r.workload, v2, r.profile).step_seconds);
}

}  // namespace test_plan_screen

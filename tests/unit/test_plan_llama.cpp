// The planner, its screen and the theory on the Llama block (issue #48): the activation formulas
// equal what the allocator holds for llama-tiny's block; the model FLOPs count no position
// table under RoPE; the screen's memory stays a lower bound of the simulated peak; and Llama 3
// 70B on 64 GPUs and 405B on 16384 rank layouts that the model's TP, CP and PP rules accept.
#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/memory/activations.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/tensor_parallel.h"
#include "core/plan/search.h"
#include "core/theory/model_states.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/world/world.h"
#include "exercises/exercises.h"
#include "lessons/plan.h"
#include "unit/mgpu_cli.h"

namespace test_plan_llama {

using namespace mgpu;
using namespace mgpu::plan;

namespace {

GPTConfig preset(const std::string& name) {
  return lessons::plan_model(name).config;
}

Workload workload(const GPTConfig& m) {
  return {.model = m, .seams = reference::seams().hybrid()};
}

// The model's rules, each asked on its own: tp divides the heads, the kv heads and F; cp's zigzag
// chunks split the sequence; pp's stages hold the layers; and the hybrid engine's check.
void check_the_model_accepts(const GPTConfig& m, const Layout& l, int global_batch) {
  INFO(describe(l));
  CHECK(parallel::tp_divides(m, l.tp));
  CHECK(theory::pipeline_stages_fit(m.layers, l.pp));
  if (l.cp > 1)
    CHECK_NOTHROW(parallel::check_cp_size(m, m.seq_len, l.cp, parallel::CpLayout::zigzag));
  parallel::HybridOptions o{
      .schedule = l.schedule, .microbatches = l.microbatches, .virtual_stages = l.virtual_stages};
  o.mesh.tp = l.tp;
  o.mesh.dp = l.dp;
  o.mesh.pp = l.pp;
  o.sequence_parallel = l.sp;
  o.vocab_parallel_head = l.vocab_parallel_head;
  CHECK_NOTHROW(parallel::check_hybrid(m, o, l.dp * l.tp * l.pp, global_batch));
}

// A search of `model` on `gpus` H100s as `mgpu plan` runs it (its default batch and number of
// simulations: 18 s for 70B on 64 GPUs, 21 s for 405B on 16384 on two shared cores); every layout
// it proposes
// (ranked, or rejected over capacity) is one the model accepts, and at least one is ranked.
SearchResult search_checked(const GPTConfig& model, int gpus) {
  SearchRequest r;
  r.workload = workload(model);
  r.gpus = gpus;
  r.global_batch = lessons::PlanModel{}.default_global_batch;
  r.profile = HardwareProfile::load("DGX-H100");
  const SearchResult result = search(r);
  REQUIRE(!result.ranked.empty());
  for (const std::vector<Simulated>* list : {&result.ranked, &result.rejected})
    for (const Simulated& s : *list) check_the_model_accepts(model, s.layout, r.global_batch);
  for (const Layout& l : enumerate_layouts(model, gpus, r.global_batch, r.pins))
    if (!parallel::tp_divides(model, l.tp)) FAIL("enumerated tp " << l.tp << ": " << describe(l));
  return result;
}

}  // namespace

TEST_CASE("the activation formulas in GPT-2's block are Korthikanti's terms", "[memory][llama]") {
  const GPTConfig gpt2;  // 16 C kept (34 s b h in 2-byte units), 16 B of statistics, 11 C backward
  CHECK(memory::block_kept_elements_per_token(gpt2) == 16 * gpt2.dim);
  CHECK(memory::norm_statistics_bytes_per_token(gpt2) == 16);
  CHECK(memory::block_backward_elements_per_token(gpt2) == 11 * gpt2.dim);
  // llama-tiny: 5C + (H + 2 KV) D + 2F + F kept, RMSNorm's rstd only, SwiGLU's product backward.
  const GPTConfig llama = preset("llama-tiny");
  const int64_t C = llama.dim, W = llama.qkv_width(), F = llama.ffn_hidden();
  CHECK(W == C + 2 * llama.kv_dim());
  CHECK(memory::block_kept_elements_per_token(llama) == 5 * C + W + 3 * F);
  CHECK(memory::norm_statistics_bytes_per_token(llama) == 8);
  CHECK(memory::block_backward_elements_per_token(llama) == 3 * F + W + 4 * C);
}

// The lesson measures each recompute mode's bytes per block with the allocator (a phantom forward)
// and prints "differs" where the formula does not equal it.
TEST_CASE("activation_checkpointing on llama-tiny: measured bytes per layer equal the formula",
          "[memory][llama][lesson]") {
  for (const char* precision : {"fp32", "bf16"}) {
    const testing::CliResult r =
        testing::run_mgpu({"run", "activation_checkpointing", "--model", "llama-tiny", "--batch",
                           "4", "--capacity", "4MiB", "--steps", "2", "--precision", precision});
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("BT[s(K+HT)+S]") && !Catch::Contains("differs"));
  }
}

TEST_CASE("plan's model FLOPs of a Llama count no position table", "[plan][llama]") {
  GPTConfig m = preset("llama-tiny");
  m.vocab = 64;
  const Layout l{.dp = 1, .tp = 1, .pp = 1, .microbatch_size = 2, .microbatches = 1};
  const Prediction p = simulate(workload(m), l, HardwareProfile::load("DGX-H100"));
  // PaLM's count: 6 N over the multiplied parameters (wte untied: a lookup) + 12 L T C.
  const double tokens = double(l.global_batch()) * m.seq_len;
  const double n = double(theory::gpt_parameters(m) - int64_t{m.vocab} * m.dim);
  const double flops = theory::model_flops_per_token(int64_t(n), m.layers, m.seq_len, m.dim);
  CHECK(p.tflops_per_gpu * 1e12 * p.step_seconds == Approx(flops * tokens).epsilon(1e-9));
}

TEST_CASE("plan's screen memory is a lower bound of the simulated peak on Llama blocks",
          "[plan][llama][property]") {
  std::mt19937 rng(20260048);
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  auto pick = [&](std::vector<int> values) { return values[rng() % values.size()]; };
  int checked = 0;
  for (int c = 0; c < 24; ++c) {
    GPTConfig m = preset("llama-tiny");
    m.layers = pick({2, 4, 6});
    m.heads = pick({4, 8});
    m.style.kv_heads = pick({1, 2, 4});
    m.dim = m.heads * pick({8, 16});
    m.style.ffn_dim = pick({0, 96, 192});
    m.seq_len = pick({32, 64});
    m.vocab = pick({64, 256});
    const int gpus = pick({2, 4, 8});
    Pins pins;
    pins.precisions = {"bf16"};
    std::vector<Layout> layouts;
    try {
      layouts = enumerate_layouts(m, gpus, gpus * 2, pins);
    } catch (const std::invalid_argument&) {
      continue;
    }
    std::shuffle(layouts.begin(), layouts.end(), rng);
    layouts.resize(std::min<size_t>(layouts.size(), 4));
    for (const Layout& l : layouts) {
      Prediction p;
      try {
        p = simulate(workload(m), l, h100);
      } catch (const std::invalid_argument&) {
        continue;  // refused by the engine before it runs
      } catch (const RankError&) {
        continue;  // refused on a stage thread (ring attention runs no grouped-query attention yet)
      }
      INFO(describe(l) << " of " << m.layers << " layers, dim " << m.dim << ", kv heads "
                       << m.kv_head_count() << ", F " << m.ffn_hidden());
      CHECK(screen_layout(m, l, h100).memory_bytes <= p.memory_peak_total);
      ++checked;
    }
  }
  CHECK(checked > 30);
}

TEST_CASE("a pipeline of 126 layers on 16 stages is planned as Llama 3 405B ran it",
          "[plan][llama]") {
  CHECK(theory::pipeline_stages_fit(126, 16));      // 8 and 7 layers: 1.6% over the mean
  CHECK_FALSE(theory::pipeline_stages_fit(12, 8));  // 2 and 1: refused
  CHECK_FALSE(theory::pipeline_stages_fit(36, 8));  // 5 and 4: 11% over
  CHECK_FALSE(theory::pipeline_stages_fit(8, 3));   // test_hybrid's refusal stays
  for (int layers : {12, 24, 36, 48, 96})           // GPT-2 and GPT-3 depths: even or nothing
    for (int pp = 1; pp <= layers; ++pp)
      CHECK(theory::pipeline_stages_fit(layers, pp) == (layers % pp == 0));
}

TEST_CASE("plan: llama3-70b on 64 GPUs ranks layouts the model accepts", "[plan][llama]") {
  const SearchResult r = search_checked(preset("llama3-70b"), 64);
  CHECK(r.ranked.front().layout.tp <= 8);  // 8 kv heads
}

TEST_CASE("plan: llama3-405b on 16384 GPUs ranks layouts the model accepts", "[plan][llama]") {
  const SearchResult r = search_checked(preset("llama3-405b"), 16384);
  CHECK(r.ranked.front().layout.gpus() == 16384);
}

}  // namespace test_plan_llama

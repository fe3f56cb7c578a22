// Memory that tells the truth (issue 29). Every layout materialises only its own shard of the
// seeded model, bit for bit the slice of the single-device initialisation (ZeRO over an uneven
// split included), and never more: the trace's maximum over ALL its memory samples, per rank and
// category, is the partition-spec formula, from the first sample on, at gpt2-large scale on the
// phantom device too, and it is the per-rank peak the lesson prints.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/layerwise.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero.h"
#include "core/trace/chrome_trace.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "unit/mgpu_cli.h"

namespace test_memory_truth {

using namespace mgpu;
using namespace mgpu::parallel;
using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {

// ------------------------------------------------------------------ sharded initialisation

using FullValues = std::map<std::string, std::vector<float>>;

GPTConfig small_model(DType dtype) {
  GPTConfig cfg;
  cfg.vocab = 11;
  cfg.seq_len = 8;
  cfg.layers = 4;
  cfg.dim = 16;
  cfg.heads = 4;
  cfg.dtype = dtype;
  return cfg;
}

std::unique_ptr<optim::Optimizer> adamw(const ParamList& params, DType dtype) {
  return optim::make_adamw(optim::whole_params(params), dtype, optim::AdamWOptions{});
}

FullValues single_device_init(const GPTConfig& cfg) {
  GPT model(cfg);
  FullValues full;
  for (Param* p : model.params()) full[p->name] = p->data.to_vector();  // 2-byte: widened exactly
  return full;
}

// Every rank's writer "param" shards placed into full tensors; each element written once.
FullValues gathered_init(
    int ranks, const std::function<std::unique_ptr<train::Layout>(RankContext&)>& make_layout) {
  FullValues full;
  std::map<std::string, std::vector<int>> writes;
  std::vector<MemoryStats> built(static_cast<size_t>(ranks));  // right after construction
  std::mutex mutex;
  World world(WorldOptions{.ranks = ranks, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    std::unique_ptr<train::Layout> layout = make_layout(ctx);
    const MemoryStats stats = ctx.allocator.stats();
    {
      std::lock_guard lock(mutex);
      built[static_cast<size_t>(ctx.rank)] = stats;
    }
    for (const train::TensorShard& s : layout->shards()) {
      if (!s.writer || s.kind != "param") continue;
      const std::vector<float> local = s.local.to_vector();
      std::lock_guard lock(mutex);
      auto& dst = full[s.full_name];
      auto& count = writes[s.full_name];
      dst.resize(static_cast<size_t>(shape_numel(s.full_shape)));
      count.resize(dst.size());
      size_t pos = 0;
      for (const train::ShardRun& r : s.runs)
        for (int64_t i = 0; i < r.length; ++i) {
          dst[static_cast<size_t>(r.full_offset + i)] = local.at(pos++);
          count[static_cast<size_t>(r.full_offset + i)]++;
        }
    }
  });
  // Nothing larger than what the layout keeps ever existed: no category ever held more than it
  // holds once built (no full model, no fp32 copy of 2-byte weights, made and dropped).
  for (int r = 0; r < ranks; ++r)
    for (int c = 0; c < kNumMemCategories; ++c) {
      INFO("rank " << r << ", " << category_name(static_cast<MemCategory>(c)));
      CHECK(built[static_cast<size_t>(r)].peak[c] == built[static_cast<size_t>(r)].current[c]);
    }
  for (const auto& [name, count] : writes) {
    INFO(name << ": every element written by exactly one rank");
    REQUIRE(count == std::vector<int>(count.size(), 1));
  }
  return full;
}

void require_bit_equal(const FullValues& want, const FullValues& have) {
  REQUIRE(have.size() == want.size());
  for (const auto& [name, values] : want) {
    INFO(name);
    REQUIRE(have.count(name) == 1);
    REQUIRE(have.at(name) == values);  // float ==: bit for bit (no NaNs at init)
  }
}

}  // namespace

TEST_CASE("every layout's sharded initialisation is the single-device initialisation bit for bit",
          "[memory][init][equivalence]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    const GPTConfig cfg = small_model(dtype);
    const FullValues want = single_device_init(cfg);
    auto opt = [dtype](const ParamList& p) { return adamw(p, dtype); };
    SECTION("tensor parallel over 2 and 4 ranks") {
      for (int tp : {2, 4})
        require_bit_equal(want, gathered_init(tp, [&](RankContext& ctx) {
                            return tensor_parallel(cfg, *ctx.comm, opt, ex::selected_seams().tp);
                          }));
    }
    SECTION("sequence parallel over 2 ranks") {
      require_bit_equal(want, gathered_init(2, [&](RankContext& ctx) {
                          return sequence_parallel(cfg, *ctx.comm, opt, ex::selected_seams().tp);
                        }));
    }
    SECTION("ZeRO stages 0-3 over 3 ranks (units that do not divide by 3)") {
      GPT declared(cfg, BlockShard::whole(cfg));
      int64_t block = 0;
      for (Param* p : layer_params(declared, 1)) block += shape_numel(p->shape);
      REQUIRE(block % 3 != 0);
      for (int stage = 0; stage <= 3; ++stage)
        require_bit_equal(want, gathered_init(3, [&](RankContext& ctx) {
                            return zero_layout(cfg, *ctx.comm, ZeroOptions{.stage = stage}, opt,
                                               ex::selected_seams().zero);
                          }));
    }
    SECTION("pipeline over 2 and 4 stages") {
      for (int pp : {2, 4})
        require_bit_equal(want, gathered_init(pp, [&](RankContext& ctx) {
                            return parallel::pipeline_layout(
                                cfg, *ctx.comm, {.schedule = "1f1b", .microbatches = 2}, opt,
                                mgpu::ex::selected_seams().hybrid());
                          }));
    }
    SECTION("hybrid dp x tp x pp, with and without ZeRO-1") {
      for (int zero : {0, 1})
        for (MeshShape mesh : {MeshShape{.tp = 2, .dp = 2, .pp = 2}, MeshShape{.tp = 4, .dp = 2},
                               MeshShape{.dp = 3}}) {
          INFO("tp " << mesh.tp << " dp " << mesh.dp << " pp " << mesh.pp << " zero " << zero);
          const HybridOptions options{.mesh = mesh, .microbatches = 2, .zero = zero};
          require_bit_equal(want, gathered_init(mesh.tp * mesh.dp * mesh.pp, [&](RankContext& ctx) {
                              return std::make_unique<HybridLayout>(cfg, *ctx.comm, options, opt,
                                                                    ex::selected_seams().hybrid());
                            }));
        }
    }
  }
}

// ------------------------------------------------------------------ the trace's maxima

namespace {

using Maxima = std::vector<CategoryBytes>;  // per rank

// The maximum over every memory sample of the trace, per rank and category.
Maxima trace_maxima(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const trace::Trace t = trace::parse_chrome_trace(text.str(), path);
  Maxima most(static_cast<size_t>(t.num_ranks));
  for (const trace::CounterSample& s : t.counters)
    for (int c = 0; c < kNumMemCategories; ++c)
      most[static_cast<size_t>(s.rank)][c] =
          std::max(most[static_cast<size_t>(s.rank)][c], s.bytes[c]);
  return most;
}

// Runs `args` with --trace and returns the trace's maxima (and the run, for its printed report).
std::pair<Maxima, testing::CliResult> run_traced(std::vector<std::string> args) {
  const std::string path = temp_path("memory_truth_trace.json");
  args.insert(args.end(), {"--trace", path});
  testing::CliResult r = run_mgpu(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  Maxima most = trace_maxima(path);
  std::remove(path.c_str());
  return {most, r};
}

GPTConfig gpt2_large(DType dtype) {
  GPTConfig cfg;
  cfg.layers = 36;
  cfg.dim = 1280;
  cfg.heads = 20;
  cfg.seq_len = 1024;
  cfg.vocab = 50257;
  cfg.dtype = dtype;
  return cfg;
}

// Parameters of one block that tensor parallelism splits (q, k, v, fc and both projections'
// weights) and that it keeps whole (layernorms, the projections' biases).
int64_t block_split(int64_t c) {
  return 12 * c * c + 7 * c;
}
int64_t block_whole(int64_t c) {
  return 6 * c;
}
int64_t embedding_params(const GPTConfig& cfg) {
  return int64_t{cfg.vocab} * cfg.dim + int64_t{cfg.seq_len} * cfg.dim;
}
int64_t head_params(const GPTConfig& cfg) {
  return 2 * int64_t{cfg.dim} + int64_t{cfg.vocab} * cfg.dim;
}
int64_t all_params(const GPTConfig& cfg) {
  return embedding_params(cfg) + head_params(cfg) +
         cfg.layers * (block_split(cfg.dim) + block_whole(cfg.dim));
}

// The elements rank `rank` of `ranks` owns of every flat ZeRO unit, and the largest unit.
std::pair<int64_t, int64_t> zero_owned(const GPTConfig& cfg, int ranks, int rank) {
  GPT declared(cfg, BlockShard::whole(cfg));  // shapes only: no memory
  int64_t owned = 0, largest = 0;
  for (int layer = 0; layer < layer_count(declared); ++layer) {
    int64_t n = 0;
    for (Param* p : layer_params(declared, layer)) n += shape_numel(p->shape);
    const auto [begin, end] = comm::chunk_range(n, ranks, rank);
    owned += end - begin;
    largest = std::max(largest, n);
  }
  return {owned, largest};
}

// Parameters, gradients (fp32) and AdamW state with fp32 masters (bf16): 2 + 4 + 12 B each.
void require_model_states(const CategoryBytes& most, int64_t params, int64_t grads,
                          int64_t optimizer) {
  CHECK(at(most, MemCategory::parameters) == 2 * params);
  CHECK(at(most, MemCategory::gradients) == 4 * grads);
  CHECK(at(most, MemCategory::optimizer_state) == 12 * optimizer);
}

std::vector<std::string> phantom_large(std::vector<std::string> args) {
  // Untied, as the hand counts above (the tied preset's one wte is tested with the checkpoints).
  for (const char* a : {"--device", "phantom", "--model", "gpt2-large", "--tie-embeddings", "off",
                        "--precision", "bf16", "--steps", "1", "-q"})
    args.push_back(a);
  return args;
}

}  // namespace

TEST_CASE("phantom gpt2-large ZeRO: the trace's maxima are the sharded model states",
          "[memory][zero][phantom]") {
  const GPTConfig cfg = gpt2_large(DType::bf16);
  const int64_t psi = all_params(cfg);
  const int ranks = 8;
  for (int stage = 1; stage <= 3; ++stage) {
    INFO("stage " << stage);
    const auto [most, run] = run_traced(phantom_large(
        {"run", "zero", "--stage", std::to_string(stage), "--ranks", std::to_string(ranks)}));
    REQUIRE(most.size() == size_t(ranks));
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      const auto [owned, largest] = zero_owned(cfg, ranks, r);
      require_model_states(most[r], stage >= 3 ? owned : psi, stage >= 2 ? owned : psi, owned);
      // In flight (stage 3): at most two gathered units (2 B) and two gradient buckets (4 B).
      if (stage == 3)
        CHECK(at(most[r], MemCategory::comm_buffers) <= 12 * largest + 8 * largest / ranks + 64);
    }
  }
}

TEST_CASE("phantom gpt2-large tensor parallel, pipeline and hybrid hold only their specs",
          "[memory][phantom]") {
  const GPTConfig cfg = gpt2_large(DType::bf16);
  const int64_t c = cfg.dim, layers = cfg.layers;
  SECTION("tensor parallel over 4 ranks") {
    const int64_t local = all_params(cfg) - layers * block_split(c) + layers * block_split(c) / 4;
    const auto [most, run] = run_traced(phantom_large({"run", "tensor_parallel", "--ranks", "4"}));
    REQUIRE(most.size() == 4u);
    for (const CategoryBytes& m : most) require_model_states(m, local, local, local);
  }
  SECTION("pipeline over 4 stages") {
    const auto [most, run] = run_traced(phantom_large({"run", "pipeline", "--ranks", "4"}));
    REQUIRE(most.size() == 4u);
    for (int s = 0; s < 4; ++s) {
      INFO("stage " << s);
      const int64_t mine = layers / 4 * (block_split(c) + block_whole(c)) +
                           (s == 0 ? embedding_params(cfg) : 0) + (s == 3 ? head_params(cfg) : 0);
      require_model_states(most[s], mine, mine, mine);
    }
  }
  SECTION("hybrid dp 2 x tp 2 x pp 2") {
    const auto [most, run] = run_traced(
        phantom_large({"run", "hybrid", "--ranks", "8", "--dp", "2", "--tp", "2", "--pp", "2"}));
    REQUIRE(most.size() == 8u);
    for (int r = 0; r < 8; ++r) {
      const int s = r / 4;  // tp fastest, then dp, then pp
      INFO("rank " << r << ", stage " << s);
      const int64_t mine = layers / 2 * (block_split(c) / 2 + block_whole(c)) +
                           (s == 0 ? embedding_params(cfg) : 0) + (s == 1 ? head_params(cfg) : 0);
      require_model_states(most[r], mine, mine, mine);
    }
  }
}

namespace {

// A printed row: its label, then one right-aligned column per rank (as the lessons format it).
std::string row(const std::string& label, int label_width, const std::vector<int64_t>& bytes,
                int width) {
  std::string out = fmt::format("  {:<{}}", label, label_width);
  for (int64_t b : bytes) out += fmt::format(" {:>{}}", format_bytes(b), width);
  return out;
}

std::vector<int64_t> per_rank(const Maxima& most, MemCategory c) {
  std::vector<int64_t> out;
  for (const CategoryBytes& m : most) out.push_back(at(m, c));
  return out;
}

}  // namespace

TEST_CASE("single_device prints the trace's maxima as its peaks, 2 B weights in bf16 and fp16",
          "[memory][precision][lesson]") {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    INFO(precision);
    const auto [most, run] =
        run_traced(testing::with_tiny_model({"run", "single_device", "--precision", precision}));
    REQUIRE(most.size() == 1u);
    // "peak memory per rank": every category, as the trace's maximum over the whole run.
    std::vector<int64_t> row0;
    for (int c = 0; c < kNumMemCategories; ++c) row0.push_back(most[0][c]);
    CHECK_THAT(run.out, Catch::Contains(row("0", 6, row0, 15)));
    std::smatch model;
    std::regex_search(run.out, model, std::regex(R"(([\d,]+) parameters)"));
    REQUIRE(!model.empty());
    std::string digits = model[1];
    digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
    const int64_t psi = std::stoll(digits);
    const bool fp32 = std::string(precision) == "fp32";
    CHECK(at(most[0], MemCategory::parameters) == (fp32 ? 4 : 2) * psi);
    CHECK(at(most[0], MemCategory::gradients) == 4 * psi);
    CHECK(at(most[0], MemCategory::optimizer_state) == (fp32 ? 8 : 12) * psi);
    CHECK_THAT(run.out,
               Catch::Contains(fp32 ? "4 B weights + 4 B gradients + 8 B adamw state = 16 B"
                                    : "2 B weights + 4 B gradients + 12 B adamw state = 18 B"));
  }
}

TEST_CASE("zero, tensor_parallel and context_parallel print the trace's maxima as their peaks",
          "[memory][zero][lesson]") {
  for (int stage = 1; stage <= 3; ++stage) {
    INFO("zero stage " << stage);
    const auto [most, run] = run_traced(testing::with_tiny_model(
        {"run", "zero", "--stage", std::to_string(stage), "--ranks", "3", "--batch", "6"}));
    REQUIRE(most.size() == 3u);
    INFO(run.out);
    for (MemCategory c :
         {MemCategory::parameters, MemCategory::gradients, MemCategory::optimizer_state})
      CHECK_THAT(run.out, Catch::Contains(row(category_name(c), 18, per_rank(most, c), 11)));
  }
  for (const char* precision : {"fp32", "bf16"}) {
    INFO("tensor_parallel " << precision);
    const auto [most, run] = run_traced(testing::with_tiny_model(
        {"run", "tensor_parallel", "--ranks", "2", "--precision", precision}));
    REQUIRE(most.size() == 2u);
    INFO(run.out);
    const std::string weights = std::string(precision) == "fp32" ? "weights" : "weights (2 B)";
    CHECK_THAT(run.out,
               Catch::Contains(row(weights, 16, {at(most[0], MemCategory::parameters)}, 12)));
    CHECK_THAT(run.out,
               Catch::Contains(row("gradients", 16, {at(most[0], MemCategory::gradients)}, 12)));
  }
  {
    INFO("context_parallel");
    const auto [most, run] =
        run_traced(testing::with_tiny_model({"run", "context_parallel", "--ranks", "2"}));
    REQUIRE(most.size() == 2u);
    const std::vector<int64_t> activations = per_rank(most, MemCategory::activations);
    CHECK_THAT(run.out, Catch::Contains(fmt::format("peak activations per GPU (allocator): {} ",
                                                    format_bytes(*std::max_element(
                                                        activations.begin(), activations.end())))));
  }
}

}  // namespace test_memory_truth

// ZeRO stages 0-3: on 1..8 ranks (unit sizes that do not divide by the rank count included) every
// stage trains to the single-device parameters and AdamW state when its shards are mapped into
// the full model, each element written by exactly one rank; each rank's optimizer state is
// 8 B x its 1/N chunk; stage 3 sends 1.5x what stage 0 sends; the transient gathered units and
// gradient buckets are freed; bad stages are refused.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>

#include "common/selected_seams.h"
#include "common/single_device_reference.h"
#include "core/comm/comm.h"
#include "core/data/task.h"
#include "core/parallel/zero.h"
#include "core/trace/analysis.h"
#include "core/world/world.h"
#include "exercises/exercises.h"

namespace test_zero {

using namespace mgpu;
using namespace mgpu::parallel;

namespace {
constexpr int kSteps = 3, kSeq = 8;

GPTConfig small_model(const data::Task& task) {
  GPTConfig cfg;
  cfg.vocab = task.vocab_size();
  cfg.seq_len = kSeq;
  cfg.layers = 2;
  cfg.dim = 16;
  cfg.heads = 2;
  return cfg;
}

std::unique_ptr<optim::Optimizer> adamw(const ParamList& params) {
  optim::AdamWOptions o;
  o.lr = 3e-3f;
  return std::make_unique<optim::AdamW>(params, o);
}

using testing::FullTensors;

FullTensors train_single_device(const GPTConfig& cfg, const data::Task& task, int batch) {
  return testing::train_single_device_reference(cfg, task, adamw, kSteps, batch, kSeq);
}

struct ZeroRun {
  FullTensors full;
  std::map<std::string, std::vector<int>> covered;  // writes per element (must be 1)
  std::vector<int64_t> optimizer_bytes, owned;      // per rank
  std::vector<MemoryStats> memory;
  trace::Trace trace;
};

ZeroRun train_zero(const GPTConfig& cfg, const data::Task& task, int ranks, ZeroOptions options,
                   int batch, const ZeroSeams& seams = reference::seams().zero) {
  ZeroRun run;
  run.optimizer_bytes.resize(ranks);
  run.owned.resize(ranks);
  run.memory.resize(ranks);
  std::mutex mutex;
  World world(WorldOptions{.ranks = ranks, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto mesh = zero_layout(cfg, *ctx.comm, options, adamw, seams);
    auto& layout = *mesh;
    ctx.allocator.reset_peaks();
    for (int step = 0; step < kSteps; ++step) {
      StepScope scope(step);
      layout.step(task.sample(step, batch, kSeq), step);
    }
    std::lock_guard lock(mutex);
    run.optimizer_bytes[ctx.rank] = layout.optimizer()->state_bytes();
    run.owned[ctx.rank] = static_cast<ZeroPart&>(layout.part()).owned_elements();
    run.memory[ctx.rank] = ctx.allocator.stats();
    for (const train::TensorShard& s : layout.shards()) {
      if (!s.writer) continue;
      auto& dst = run.full[s.full_name];
      auto& count = run.covered[s.full_name];
      dst.resize(static_cast<size_t>(shape_numel(s.full_shape)));
      count.resize(dst.size());
      const std::vector<float> local = s.local.to_vector();
      size_t pos = 0;
      for (const train::ShardRun& r : s.runs)
        for (int64_t i = 0; i < r.length; ++i) {
          dst[static_cast<size_t>(r.full_offset + i)] = local.at(pos++);
          count[static_cast<size_t>(r.full_offset + i)]++;
        }
    }
  });
  run.trace = world.collect_trace();
  return run;
}

int64_t param_count(const GPTConfig& cfg) {
  GPT model(cfg);
  return model.num_params();
}

float worst_difference(const FullTensors& want, const FullTensors& have) {
  float worst = 0;
  for (const auto& [name, w] : want) {
    auto it = have.find(name);
    if (it == have.end() || it->second.size() != w.size()) return INFINITY;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(it->second[i] - w[i]));
  }
  return have.size() == want.size() ? worst : INFINITY;
}

}  // namespace

TEST_CASE("every ZeRO stage trains to the single-device parameters on 1 to 8 ranks",
          "[zero][equivalence]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  for (int ranks = 1; ranks <= 8; ++ranks) {
    const int batch = 2 * ranks;  // the same global batch on one device and on N ranks
    const FullTensors reference = train_single_device(cfg, *task, batch);
    for (int stage = 0; stage <= 3; ++stage) {
      INFO("ranks = " << ranks << ", stage = " << stage);
      ZeroRun run = train_zero(cfg, *task, ranks, {.stage = stage}, batch);
      // Rounding only: gradients are averaged in another order (as for DDP).
      CHECK(worst_difference(reference, run.full) < 2e-5f);
      bool once = true;
      for (const auto& [name, count] : run.covered)
        for (int c : count) once = once && c == 1;
      CHECK(once);
    }
  }
}

TEST_CASE("ZeRO cuts uneven shards: the first n % N ranks own one element more", "[zero][shards]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  for (int ranks : {3, 7}) {
    World world(WorldOptions{.ranks = ranks, .all_reduce = selected_all_reduce()});
    std::vector<std::vector<std::pair<int64_t, int64_t>>> chunks(ranks);
    std::vector<int64_t> numels;
    std::mutex mutex;
    world.run([&](RankContext& ctx) {
      auto layout = zero_layout(cfg, *ctx.comm, {.stage = 3}, adamw, reference::seams().zero);
      std::lock_guard lock(mutex);
      for (const ZeroUnit& u : static_cast<ZeroPart&>(layout->part()).units()) {
        chunks[ctx.rank].push_back({u.begin, u.end});
        if (ctx.rank == 0) numels.push_back(u.numel);
      }
    });
    bool some_uneven = false;
    for (size_t unit = 0; unit < numels.size(); ++unit) {
      INFO("ranks = " << ranks << ", unit " << unit << " of " << numels[unit] << " elements");
      some_uneven = some_uneven || numels[unit] % ranks != 0;
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto [begin, end] = chunks[r][unit];
        CHECK(begin == next);  // consecutive chunks cover the unit
        CHECK(end - begin == numels[unit] / ranks + (r < numels[unit] % ranks ? 1 : 0));
        next = end;
      }
      CHECK(next == numels[unit]);
    }
    CHECK(some_uneven);
  }
}

TEST_CASE("ZeRO memory: AdamW state is 8 B per owned element - 8 Psi / N per rank",
          "[zero][memory]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  const int64_t psi = param_count(cfg);
  const int ranks = 4, units = cfg.layers + 2;
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    ZeroRun run = train_zero(cfg, *task, ranks, {.stage = stage}, 8);
    int64_t total_owned = 0;
    for (int r = 0; r < ranks; ++r) {
      const MemoryStats& m = run.memory[r];
      const auto at = [&](MemCategory c) { return m.peak[static_cast<int>(c)]; };
      total_owned += run.owned[r];
      CHECK(run.optimizer_bytes[r] == 8 * run.owned[r]);
      CHECK(at(MemCategory::optimizer_state) == 8 * run.owned[r]);
      if (stage == 0) {
        CHECK(run.owned[r] == psi);
      } else {  // psi / N, each unit's chunk rounded up at most one element
        CHECK(run.owned[r] >= psi / ranks - units);
        CHECK(run.owned[r] <= psi / ranks + units);
      }
      // gradients: whole for stages 0-1, my chunk for 2-3; parameters: whole up to stage 2
      CHECK(at(MemCategory::gradients) == 4 * (stage < 2 ? psi : run.owned[r]));
      CHECK(at(MemCategory::parameters) == 4 * (stage < 3 ? psi : run.owned[r]));
    }
    CHECK(total_owned == (stage == 0 ? ranks * psi : psi));
  }
}

TEST_CASE("ZeRO-3 sends 1.5x the bytes of ZeRO-0 per step and stages 1-2 the same as stage 0",
          "[zero][traffic]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  const int ranks = 4;
  std::vector<double> sent;
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroRun run = train_zero(cfg, *task, ranks, {.stage = stage}, 8);
    trace::TraceSummary s = trace::analyze(run.trace, kSteps - 1);
    sent.push_back(static_cast<double>(s.ranks.at(0).wire_bytes));
  }
  REQUIRE(sent[0] > 0);
  CHECK(sent[1] / sent[0] == Approx(1.0).epsilon(0.05));
  CHECK(sent[2] / sent[0] == Approx(1.0).epsilon(0.05));
  CHECK(sent[3] / sent[0] == Approx(1.5).epsilon(0.05));
}

TEST_CASE("a ZeRO stage other than 0-3 is refused", "[zero][errors]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  World world(WorldOptions{.ranks = 1, .all_reduce = selected_all_reduce()});
  std::string message;
  world.run([&](RankContext& ctx) {
    try {
      ZeroPart part(cfg, *ctx.comm, {.stage = 4}, reference::seams().zero);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  });
  CHECK(message == "ZeRO stage must be 0, 1, 2 or 3, got 4");
}

TEST_CASE("stage 1 cuts its chunks and takes its step through exercise 08's seams",
          "[zero][seams]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  std::atomic<int> chunks{0}, steps{0};
  const ZeroSeams counting{
      "counting",
      [&](int64_t n, int ranks, int rank) {
        ++chunks;
        return reference::zero_owned_chunk(n, ranks, rank);
      },
      [&](comm::Comm& dp, const std::vector<FlatUnit>& units, const std::function<void()>& update) {
        ++steps;
        reference::zero_sharded_step(dp, units, update);
      }};
  const FullTensors reference_run = train_single_device(cfg, *task, 4);
  ZeroRun run = train_zero(cfg, *task, 2, {.stage = 1}, 4, counting);
  CHECK(chunks == 2 * (cfg.layers + 2));  // every unit on both ranks
  CHECK(steps == 2 * kSteps);
  CHECK(worst_difference(reference_run, run.full) < 2e-5f);
}

}  // namespace test_zero

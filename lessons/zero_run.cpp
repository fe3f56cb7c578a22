// The ZeRO lesson's run: --ranks data-parallel ranks train at one stage, and rank 0 gathers every
// rank's memory by category and the parameter elements it owns.
#include <algorithm>
#include <mutex>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/theory/model_states.h"
#include "exercises/selection.h"
#include "lessons/ddp.h"
#include "lessons/training.h"
#include "lessons/zero.h"
#include "lessons/zero_internal.h"

namespace mgpu::lessons {

namespace {

constexpr int kCategories = kNumMemCategories;

// What rank 0 gathers from every rank after training, by name (it travels as int64s through
// train::gather_to_root, in this order).
struct ZeroRankStats {
  CategoryBytes peak{};        // allocator peaks by category, from after set-up
  CategoryBytes settled{};     // current bytes by category after the last step
  int64_t owned_elements = 0;  // parameter elements this rank's optimizer updates
  int64_t largest_unit = 0;    // elements of the largest unit (a block, or the embedding)

  std::vector<int64_t> values() const {
    std::vector<int64_t> v(peak.begin(), peak.end());
    v.insert(v.end(), settled.begin(), settled.end());
    v.insert(v.end(), {owned_elements, largest_unit});
    return v;
  }
  static ZeroRankStats from(const std::vector<int64_t>& v) {
    ZeroRankStats s;
    std::copy_n(v.begin(), kCategories, s.peak.begin());
    std::copy_n(v.begin() + kCategories, kCategories, s.settled.begin());
    s.owned_elements = v[2 * kCategories];
    s.largest_unit = v[2 * kCategories + 1];
    return s;
  }
};

}  // namespace

// ---- the run -------------------------------------------------------------------------------

ZeroRunResult train_zero(const CommonOptions& c, const parallel::ZeroOptions& options,
                         std::ostream& out) {
  WorldOptions wopt = c.world_options();
  const int global_batch = resolve_global_batch(c, DataParallelOptions{});
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  ZeroRunResult result;
  result.params = count_params(cfg);
  result.param_bytes = static_cast<int>(dtype_size(cfg.dtype));
  World world(wopt);
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, result.params));
    fmt::print(out,
               "shards: every layer (the embedding, each block, the head) is one flat unit, cut "
               "into {} consecutive chunks\n        (the first n % {} ranks one element more); "
               "rank r updates only its chunk\n",
               c.ranks, c.ranks);
    fmt::print(out, "data:   global batch {} = {} per rank x {} ranks\n", global_batch,
               global_batch / c.ranks, c.ranks);
    fmt::print(out, "device: {}\n\n", describe_world(wopt));
  }
  LossLog log(c, out);
  std::mutex mutex;
  train::TrainResult trained = train::train(
      world, *task, train_options(c, global_batch, cfg),
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        return parallel::zero_layout(cfg, *ctx.comm, options, optimizer_factory(c),
                                     ex::selected_seams().zero);
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout& layout) {
        const auto& zero =
            static_cast<parallel::ZeroPart&>(static_cast<parallel::MeshLayout&>(layout).part());
        const MemoryStats stats = ctx.allocator.stats();
        ZeroRankStats mine{
            .peak = stats.peak, .settled = stats.current, .owned_elements = zero.owned_elements()};
        for (const parallel::ZeroUnit& u : zero.units())
          mine.largest_unit = std::max(mine.largest_unit, u.numel);
        auto all = train::gather_to_root(ctx, mine.values());
        if (ctx.rank != 0) return;
        std::lock_guard lock(mutex);
        for (const auto& v : all) {
          const ZeroRankStats rank = ZeroRankStats::from(v);
          result.peak.push_back(rank.peak);
          result.settled.push_back(rank.settled);
          result.owned.push_back(rank.owned_elements);
          result.largest_unit = rank.largest_unit;
        }
      });
  result.losses = trained.losses;
  result.first_step = trained.first_step;
  result.checkpoint_written = trained.checkpoint_written;
  result.fresh_optimizer = trained.fresh_optimizer;
  result.skipped_steps = trained.skipped_steps;
  result.loss_scale = trained.loss_scale;
  const theory::StateBytes b = detail::state_bytes(c, result.param_bytes);
  const double psi = static_cast<double>(result.params), n = c.ranks;
  nlohmann::json meta = {
      {"lesson", "zero"},
      {"config", c.to_json()},
      {"zero", {{"stage", options.stage}, {"prefetch", options.prefetch}}},
      {"predictions",
       {{"model_state_bytes_per_rank", theory::zero_model_states(options.stage, b, psi, n).total()},
        {"bytes_sent_per_rank", theory::zero_bytes_sent(options.stage, b, psi, n)}}}};
  result.trace = world.collect_trace(meta);
  return result;
}

}  // namespace mgpu::lessons

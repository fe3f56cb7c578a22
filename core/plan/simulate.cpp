// The planner's engine (simulate.h), top to bottom:
//   1. the layout as the hybrid layout's options, refused in one line when it cannot run
//      (layout_options.cpp);
//   2. the representative world: one thread per pipeline stage, each the dp0/cp0/tp0 rank of its
//      stage, seen by the unchanged HybridLayout as that rank of the full world (its tp/cp/dp
//      groups are symmetric comms, its pp group the real stage threads);
//   3. two training steps through the one training loop on the phantom device (a warm-up and the
//      measured one), then the prediction read off the trace and the allocators (predict.cpp).
#include "core/plan/simulate.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/symmetric.h"
#include "core/parallel/hybrid.h"
#include "core/plan/simulate_internal.h"
#include "core/run/run.h"
#include "core/trace/analysis.h"
#include "core/train/trainer.h"

namespace mgpu::plan {

using detail::hybrid_options;
using detail::measure_step;
using detail::model_for;
using detail::optimizer_factory;
using detail::predict;
using detail::RankMemory;
using detail::RankSummary;

namespace {

using parallel::Axis;

// Tokens for phantom batches: the values are never read (the device holds none), so every row is
// zeros instead of a sampled sequence; a 1536 x 2048 batch then costs a memset, not a sampler.
class PhantomTokens final : public data::Task {
 public:
  explicit PhantomTokens(int vocab) : Task(0), vocab_(vocab) {}
  std::string name() const override { return "phantom"; }
  int vocab_size() const override { return vocab_; }

 protected:
  void generate_row(uint64_t, int n, int32_t* out) const override { std::fill(out, out + n, 0); }

 private:
  int vocab_;
};

// ------------------------------------------------------------------ 2. the representative world

// The first rank of each stage's mesh block, dp0/cp0/tp0, stands for its stage: with tp fastest,
// then cp and dp, stage s's representative is world rank s * (tp * cp * dp).
int stage_stride(const parallel::MeshShape& mesh) {
  return mesh.tp * mesh.cp * mesh.dp;
}

// The stage threads form a world of pp ranks whose point-to-point is priced by the thread world's
// profile on THREAD indices. Thread s is world rank s * stride, so the node size is restated in
// stages: one stage per node when a stage's block fills a node or more, rpn / stride stages per
// node when blocks tile a node. Only the links change; kernels cost the same. Empty when neither
// holds (e.g. 3 GPUs per stage on nodes of 8: nodes hold different numbers of stages).
std::optional<HardwareProfile> stage_threads_profile(const HardwareProfile& profile, int stride,
                                                     int stages) {
  const int rpn = std::max(1, profile.ranks_per_node);
  HardwareProfile threads = profile;
  if (stages == 1)  // no messages between stages
    return threads;
  if (stride >= rpn)
    threads.ranks_per_node = 1;
  else if (rpn % stride == 0)
    threads.ranks_per_node = rpn / stride;
  else
    return std::nullopt;
  return threads;
}

// The world as one stage's representative sees it: the full size, its full world rank, and the
// mesh's groups built without the absent ranks (mesh_group, the mesh's group factory): pp is the
// real stage threads, tp/cp/dp are symmetric groups priced on the full world's links. Only
// point-to-point between representatives runs on it directly; nothing else may use the world
// itself.
class StageWorld final : public comm::Comm {
 public:
  StageWorld(comm::Comm& stages, const parallel::MeshShape& mesh, const HardwareProfile& profile)
      : stages_(stages), size_(mesh.ranks()), stride_(stage_stride(mesh)), profile_(profile) {}

  int rank() const override { return stages_.rank() * stride_; }
  int size() const override { return size_; }
  int world_rank(int group_rank) const override { return group_rank; }
  std::string name() const override { return "world"; }
  std::string backend() const override { return "representative"; }

  void send(const Tensor& t, int dst, int tag) override { stages_.send(t, thread_of(dst), tag); }
  void recv(Tensor& t, int src, int tag) override { stages_.recv(t, thread_of(src), tag); }
  comm::Work isend(const Tensor& t, int dst, int tag) override {
    return stages_.isend(t, thread_of(dst), tag);
  }
  comm::Work irecv(Tensor& t, int src, int tag) override {
    return stages_.irecv(t, thread_of(src), tag);
  }

  void all_reduce(Tensor&, comm::ReduceOp) override { refuse("all_reduce"); }
  comm::Work all_reduce_async(Tensor&, comm::ReduceOp) override { refuse("all_reduce_async"); }
  void reduce_scatter(const Tensor&, Tensor&, comm::ReduceOp) override { refuse("reduce_scatter"); }
  void all_gather(const Tensor&, Tensor&) override { refuse("all_gather"); }
  void all_to_all(const Tensor&, Tensor&) override { refuse("all_to_all"); }
  void all_to_all_v(const Tensor&, std::span<const int64_t>, Tensor&,
                    std::span<const int64_t>) override {
    refuse("all_to_all_v");
  }
  comm::Work reduce_scatter_async(const Tensor&, Tensor&, comm::ReduceOp) override {
    refuse("reduce_scatter_async");
  }
  comm::Work all_gather_async(const Tensor&, Tensor&) override { refuse("all_gather_async"); }
  void broadcast(Tensor&, int) override { refuse("broadcast"); }
  void barrier() override { refuse("barrier"); }
  std::unique_ptr<comm::Comm> split(int, int, const std::string&) override { refuse("split"); }

  std::unique_ptr<comm::Comm> mesh_group(Axis axis, const std::vector<int>& members, int my_index,
                                         const std::string& name) {
    if (axis == Axis::pp) return stages_.split(0, my_index, name);  // every member is a thread
    return comm::make_symmetric_comm(current_rank(), profile_, members, my_index, name);
  }

 private:
  int thread_of(int world_rank) const {
    if (world_rank < 0 || world_rank >= size_ || world_rank % stride_ != 0)
      throw std::logic_error(fmt::format(
          "representative world: rank {} is not run (only each stage's first rank, every {})",
          world_rank, stride_));
    return world_rank / stride_;
  }

  [[noreturn]] void refuse(const char* op) const {
    throw std::logic_error(fmt::format(
        "representative world: {} over the whole world is not simulated (a layout takes its "
        "groups from the mesh)",
        op));
  }

  comm::Comm& stages_;
  int size_, stride_;
  HardwareProfile profile_;
};

// The world the simulation runs on: phantom devices on the modeled clock, one thread per stage
// (representative: the stage's tp x cp x dp ranks stand in for it) or one per rank (full).
WorldOptions simulation_world(const Layout& layout, const HardwareProfile& profile, int stride,
                              const std::optional<HardwareProfile>& stage_profile,
                              bool representative) {
  WorldOptions world_options;
  world_options.device = DeviceKind::phantom;
  world_options.clock = ClockKind::modeled;
  world_options.backend = "local";
  world_options.capacity_override = 0;  // an over-capacity layout is simulated, not refused
  world_options.comm_timeout = 600;     // stage threads wait on each other in real time
  if (representative) {
    if (layout.pp > 64)
      throw std::invalid_argument(fmt::format(
          "--pp {}: the representative simulation runs one thread per stage, at most 64",
          layout.pp));
    if (!stage_profile)
      throw std::invalid_argument(fmt::format(
          "tp x cp x dp = {} GPUs per stage neither fill nor tile a node of {}, which the "
          "representative simulation needs to place the stages on nodes: use a multiple or a "
          "divisor of {}",
          stride, profile.ranks_per_node, profile.ranks_per_node));
    world_options.ranks = layout.pp;
    world_options.profile = *stage_profile;
  } else {
    if (layout.gpus() > 64)
      throw std::invalid_argument(
          fmt::format("a full simulation runs every rank as a thread, at most 64, not {}; use the "
                      "representative one",
                      layout.gpus()));
    world_options.ranks = layout.gpus();
    world_options.profile = profile;
  }
  return world_options;
}

Prediction simulate_in_world(const Workload& workload, const Layout& layout,
                             const HardwareProfile& profile, Simulation mode) {
  const auto wall_start = std::chrono::steady_clock::now();
  const GPTConfig cfg = model_for(workload, layout);
  const parallel::HybridOptions options = hybrid_options(cfg, workload, layout);
  const int stride = stage_stride(options.mesh);
  const std::optional<HardwareProfile> stage_profile =
      stage_threads_profile(profile, stride, layout.pp);
  // Stages that cannot be placed on nodes as threads: a small mesh runs in full instead (exact).
  if (!stage_profile && layout.gpus() <= 64) mode = Simulation::full;
  const bool representative = mode == Simulation::representative;
  WorldOptions world_options =
      simulation_world(layout, profile, stride, stage_profile, representative);
  world_options.all_reduce = workload.seams.all_reduce;
  World world(world_options);
  std::vector<RankSummary> summaries(static_cast<size_t>(world.size()));
  for (int r : world.local_ranks())
    world.rank(r).tracer.sink = [&mine = summaries[r]](const trace::Event& e) { mine.add(e); };

  const PhantomTokens task(cfg.vocab);
  run::RunSpec spec{.model = cfg,
                    .world = world_options,
                    .optimizer = optimizer_factory(workload, cfg.dtype),
                    .parallelism = run::Hybrid{.options = options, .seams = workload.seams}};
  spec.train.steps = 2;  // a warm-up step, then the measured one
  spec.train.global_batch = layout.global_batch();
  spec.train.seq = cfg.seq_len;
  spec.train.report_ranks = true;
  if (cfg.dtype == DType::f16) spec.train.loss_scaling = train::LossScaling{};

  std::vector<std::unique_ptr<StageWorld>> stage_worlds(static_cast<size_t>(world.size()));
  std::vector<run::RunSpec> rank_specs(static_cast<size_t>(world.size()), spec);
  const train::TrainResult trained = train::train(
      world, task, spec.train, [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        comm::Comm* world_comm = ctx.comm;
        if (representative) {
          stage_worlds[ctx.rank] = std::make_unique<StageWorld>(*ctx.comm, options.mesh, profile);
          world_comm = stage_worlds[ctx.rank].get();
          std::get<run::Hybrid>(rank_specs[ctx.rank].parallelism).options.mesh_groups =
              [stage = stage_worlds[ctx.rank].get()](Axis axis, const std::vector<int>& members,
                                                     int my_index, const std::string& name) {
                return stage->mesh_group(axis, members, my_index, name);
              };
        }
        auto built = run::make_layout(rank_specs[ctx.rank], *world_comm);
        ctx.allocator.reset_peaks();  // training's memory, not the set-up's full-model copy
        return built;
      });
  std::vector<RankMemory> memory;
  for (const train::RankReport& rank : trained.ranks)
    memory.push_back({rank.memory, rank.stage.value().pp});
  Prediction p =
      predict(measure_step(summaries, spec.train.steps - 1), memory, cfg, layout, profile);
  p.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return p;
}

}  // namespace

Prediction simulate(const Workload& workload, const Layout& layout, const HardwareProfile& profile,
                    Simulation mode) {
  Prediction p = simulate_in_world(workload, layout, profile, mode);
#ifdef __GLIBC__
  // Up to 64 stage threads each leave their malloc arena holding freed pages; handing them back
  // keeps a search over hundreds of layouts at one simulation's memory, not every arena's peak.
  malloc_trim(0);
#endif
  return p;
}

}  // namespace mgpu::plan

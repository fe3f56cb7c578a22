// run(spec): one factory per alternative of the parallelism, then the one training loop.
#include "core/run/run.h"

#include <memory>

#include "core/parallel/data_parallel.h"
#include "core/parallel/expert_parallel.h"
#include "core/parallel/mesh.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/single_device.h"

namespace mgpu::run {

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

using LayoutPtr = std::unique_ptr<train::Layout>;

// A mesh with one axis over the whole world; the layout keeps it alive.
std::shared_ptr<parallel::Mesh> one_axis_mesh(comm::Comm& world, parallel::MeshShape shape) {
  return std::make_shared<parallel::Mesh>(world, shape);
}

LayoutPtr data_parallel_layout(const RunSpec& spec, comm::Comm& world, const DataParallel& d) {
  const int shard = d.same_shard ? 0 : world.rank();
  return parallel::ddp_layout(spec.model, world, d.options, d.accum, spec.optimizer, shard,
                              d.seams);
}

LayoutPtr tensor_parallel_layout(const RunSpec& spec, comm::Comm& world, const TensorParallel& t) {
  auto mesh = one_axis_mesh(world, {.tp = world.size()});
  comm::Comm& tp = mesh->group(parallel::Axis::tp);
  if (t.sequence_parallel)
    return parallel::sequence_parallel(spec.model, tp, spec.optimizer, t.seams, mesh);
  return parallel::tensor_parallel(spec.model, tp, spec.optimizer, t.seams, false, mesh);
}

LayoutPtr context_parallel_layout(const RunSpec& spec, comm::Comm& world,
                                  const ContextParallel& c) {
  auto mesh = one_axis_mesh(world, {.cp = world.size()});
  return parallel::context_parallel(spec.model, mesh->group(parallel::Axis::cp), c.layout,
                                    spec.model.seq_len, spec.optimizer, c.seams, mesh);
}

LayoutPtr expert_parallel_layout(const RunSpec& spec, comm::Comm& world, const ExpertParallel& e) {
  auto mesh = one_axis_mesh(world, {.dp = world.size(), .ep = e.ep});
  using parallel::Axis;
  return parallel::expert_parallel(spec.model, mesh->group(Axis::dp), mesh->group(Axis::ep),
                                   mesh->group(Axis::edp), spec.optimizer, mesh);
}

LayoutPtr hybrid_layout(const RunSpec& spec, comm::Comm& world, const Hybrid& h) {
  if (h.pipeline)
    return parallel::pipeline_layout(spec.model, world, h.options, spec.optimizer, h.seams);
  return std::make_unique<parallel::HybridLayout>(spec.model, world, h.options, spec.optimizer,
                                                  h.seams);
}

}  // namespace

std::unique_ptr<train::Layout> make_layout(const RunSpec& spec, RankContext& ctx) {
  return make_layout(spec, *ctx.comm);
}

std::unique_ptr<train::Layout> make_layout(const RunSpec& spec, comm::Comm& world) {
  return std::visit(
      Overloaded{
          [&](const SingleDevice&) -> LayoutPtr {
            return parallel::single_device_layout(spec.model, spec.optimizer);
          },
          [&](const NaiveDataParallel&) -> LayoutPtr {
            return std::make_unique<parallel::DataParallelLayout>(spec.model, world,
                                                                  spec.optimizer);
          },
          [&](const DataParallel& d) { return data_parallel_layout(spec, world, d); },
          [&](const Zero& z) -> LayoutPtr {
            return parallel::zero_layout(spec.model, world, z.options, spec.optimizer, z.seams);
          },
          [&](const TensorParallel& t) { return tensor_parallel_layout(spec, world, t); },
          [&](const ContextParallel& c) { return context_parallel_layout(spec, world, c); },
          [&](const ExpertParallel& e) { return expert_parallel_layout(spec, world, e); },
          [&](const Hybrid& h) { return hybrid_layout(spec, world, h); },
      },
      spec.parallelism);
}

RunResult run(const RunSpec& spec, const train::LossCallback& on_loss) {
  validate(spec);
  World world(spec.world);
  RunResult result;
  result.trained = train::train(
      world, *spec.task, spec.train, [&](RankContext& ctx) { return make_layout(spec, ctx); },
      on_loss);
  if (spec.trace_meta) result.trace = world.collect_trace(*spec.trace_meta);
  result.root = world.is_root();
  result.mpi = world.is_mpi();
  result.ranks = world.size();
  return result;
}

}  // namespace mgpu::run

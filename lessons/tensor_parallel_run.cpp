// The tensor-parallel lesson's run (also sequence_parallel's): every block split over a tp mesh
// axis of --ranks GPUs; rank 0 reports its parameters and memory.
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/parallel/mesh.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/tensor_parallel.h"
#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/tensor_parallel.h"
#include "lessons/training.h"

namespace mgpu::lessons {

// ---- the run -------------------------------------------------------------------------------

TensorParallelResult train_tensor_parallel(const CommonOptions& c, std::ostream& out,
                                           bool sequence_parallel) {
  const char* lesson = sequence_parallel ? "sequence_parallel" : "tensor_parallel";
  WorldOptions wopt = c.world_options();
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  parallel::check_tp_size(cfg, c.ranks);  // one line naming the sizes that work
  if (sequence_parallel) parallel::check_sp_size(cfg, c.ranks, c.seq);
  World world(wopt);
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
    fmt::print(out,
               "split:  tp={}: each GPU holds {} of {} heads and {} of {} MLP units per block\n",
               c.ranks, cfg.heads / c.ranks, cfg.heads, 4 * cfg.dim / c.ranks, 4 * cfg.dim);
    if (sequence_parallel)
      fmt::print(out,
                 "        sp:   and {} of {} tokens of each sequence in the layernorm/residual "
                 "regions\n",
                 c.seq / c.ranks, c.seq);
    fmt::print(out, "data:   {} task, the same {} sequences x {} tokens on every GPU\n",
               task->name(), c.batch, c.seq);
    fmt::print(out, "device: {}\n", describe_world(wopt));
    fmt::print(out, "optim:  {} lr {}\n\n", c.optimizer, c.lr);
  }
  TensorParallelResult result;
  LossLog log(c, out);
  train::TrainResult trained = train::train(
      world, *task, train_options(c, c.batch, cfg),
      [&](RankContext& ctx) -> std::unique_ptr<train::Layout> {
        auto mesh = std::make_shared<parallel::Mesh>(*ctx.comm, parallel::MeshShape{.tp = c.ranks});
        comm::Comm& tp = mesh->group(parallel::Axis::tp);
        const parallel::TpSeams& seams = ex::selected_seams().tp;
        return sequence_parallel
                   ? parallel::sequence_parallel(cfg, tp, optimizer_factory(c), seams, mesh)
                   : parallel::tensor_parallel(cfg, tp, optimizer_factory(c), seams, false, mesh);
      },
      [&](int step, float loss) { log.record(step, loss); },
      [&](RankContext& ctx, train::Layout& layout) {
        if (ctx.rank != 0) return;
        result.local_params = static_cast<parallel::MeshLayout&>(layout).model().num_params();
        result.memory = ctx.allocator.stats();
      });
  result.losses = trained.losses;
  if (trained.first_step > 0 || trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, trained);
  nlohmann::json meta = {{"lesson", lesson}, {"config", c.to_json()}};
  meta["config"]["tp"] = c.ranks;  // the mesh axis: the dashboard labels rows "GPU 1  tp1"
  result.trace = world.collect_trace(meta);
  if (auto last = last_step(result.trace))
    result.step_seconds = trace::analyze(result.trace, last).window.length();
  result.under_mpi = world.is_mpi();
  return result;
}

}  // namespace mgpu::lessons

// The tensor-parallel lesson's run (also sequence_parallel's): every block split over a tp mesh
// axis of --ranks GPUs; rank 0 reports its parameters and memory.
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/trace/analysis.h"
#include "exercises/selection.h"
#include "lessons/tensor_parallel.h"
#include "lessons/training.h"

namespace mgpu::lessons {

// ---- the run -------------------------------------------------------------------------------

TensorParallelResult train_tensor_parallel(const CommonOptions& c, std::ostream& out,
                                           bool sequence_parallel) {
  const char* lesson = sequence_parallel ? "sequence_parallel" : "tensor_parallel";
  std::shared_ptr<const data::Task> task = make_task(c);
  const GPTConfig cfg = model_config(c, *task);
  run::RunSpec spec = run_spec(c, task, cfg, c.batch);
  spec.parallelism =
      run::TensorParallel{.sequence_parallel = sequence_parallel, .seams = ex::selected_seams().tp};
  run::validate(spec);  // one line naming the sizes that work
  spec.train.report_ranks = true;
  spec.trace_meta = {{"lesson", lesson}, {"config", c.to_json()}};
  (*spec.trace_meta)["config"]["tp"] = c.ranks;  // the mesh axis: rows "GPU 1  tp1"
  if (!c.quiet) {
    fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
    // Grouped-query attention: the kv heads split with the query heads that read them.
    const int kv = cfg.kv_head_count();
    const std::string kv_split =
        kv != cfg.heads ? fmt::format(", {} of {} kv heads", kv / c.ranks, kv) : "";
    fmt::print(out,
               "split:  tp={}: each GPU holds {} of {} heads{} and {} of {} MLP units per block\n",
               c.ranks, cfg.heads / c.ranks, cfg.heads, kv_split, cfg.ffn_hidden() / c.ranks,
               cfg.ffn_hidden());
    if (sequence_parallel)
      fmt::print(out,
                 "        sp:   and {} of {} tokens of each sequence in the layernorm/residual "
                 "regions\n",
                 c.seq / c.ranks, c.seq);
    fmt::print(out, "data:   {} task, the same {} sequences x {} tokens on every GPU\n",
               task->name(), c.batch, c.seq);
    fmt::print(out, "device: {}\n", describe_world(spec.world));
    fmt::print(out, "optim:  {} lr {}\n\n", c.optimizer, c.lr);
  }
  TensorParallelResult result;
  LossLog log(c, out);
  run::RunResult ran = run::run(spec, [&](int step, float loss) { log.record(step, loss); });
  if (!ran.trained.ranks.empty()) {  // rank 0's process
    result.local_params = ran.trained.ranks.front().params_held;
    result.memory = ran.trained.ranks.front().memory;
  }
  result.losses = ran.trained.losses;
  if (ran.trained.first_step > 0 || ran.trained.checkpoint_written) fmt::print(out, "\n");
  print_checkpoint_lines(out, c, ran.trained);
  result.trace = std::move(ran.trace);
  if (auto last = last_step(result.trace))
    result.step_seconds = trace::analyze(result.trace, last).window.length();
  result.under_mpi = ran.mpi;
  return result;
}

}  // namespace mgpu::lessons

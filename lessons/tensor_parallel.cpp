// Lesson 7 — tensor parallelism. Megatron splits every block over the GPUs of a node: attention
// heads and MLP hidden units are divided, each GPU multiplies its slice, and 2 all-reduces in the
// forward pass (g after attn.proj and mlp.proj) plus 2 in the backward pass (f before attn.qkv
// and mlp.fc) put the activations back together. The lesson measures that traffic from the trace,
// the per-GPU memory (the block's weights, gradients and optimizer state at 1/t) from the
// allocator, and answers "my TP model trains with SGD but Adam runs out of memory — why?".
#include "lessons/tensor_parallel.h"

#include <map>
#include <mutex>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/model/checkpoint.h"
#include "core/parallel/mesh.h"
#include "core/parallel/tensor_parallel.h"
#include "core/trace/analysis.h"
#include "lessons/training.h"

namespace mgpu::lessons {

namespace {

// Parameters of the model, split into what every tp rank holds in full and what is divided.
struct TpParamCount {
  int64_t replicated = 0;  // embeddings, layernorms, row-parallel biases, head
  int64_t sharded = 0;     // qkv, attn.proj, fc, mlp.proj weights (+ column biases), all ranks
  int64_t per_rank(int tp) const { return replicated + sharded / tp; }
};

TpParamCount tp_param_count(const GPTConfig& cfg) {
  const int64_t c = cfg.dim, v = cfg.vocab, t = cfg.seq_len, l = cfg.layers;
  TpParamCount n;
  n.replicated = v * c + t * c + l * (2 * c + 2 * c + c + c) + 2 * c + v * c;
  n.sharded = l * ((3 * c * c + 3 * c) + c * c + (4 * c * c + 4 * c) + 4 * c * c);
  return n;
}

int optimizer_bytes_per_param(const std::string& optimizer) {
  return optimizer == "sgd" ? 4 : 8;  // momentum; AdamW's m and v
}

// ---- checkpoints of the full model ---------------------------------------------------------
// Interim: the one training loop (core/train/trainer) will own gathered save/resume for every
// layout; until it lands, these two helpers do it for threads-as-ranks through Layout::shards().

void copy_runs(Tensor& local, const Tensor& full, const std::vector<train::ShardRun>& runs) {
  int64_t pos = 0;
  for (const train::ShardRun& run : runs) {
    local.flat_range(pos, pos + run.length)
        .copy_from(full.flat_range(run.full_offset, run.full_offset + run.length));
    pos += run.length;
  }
}

// A full model + optimizer, set up outside the capacity (it exists only to read or write a file).
struct FullModel {
  std::unique_ptr<GPT> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::map<std::string, Tensor> by_name;
  FullModel(const CommonOptions& c, const GPTConfig& cfg) {
    model = std::make_unique<GPT>(cfg);
    optimizer = make_optimizer(c, model->params());
    for (Param* p : model->params()) by_name[p->name] = p->data;
    for (const auto& s : optimizer->state()) by_name[s.name] = s.tensor;
  }
};

int resume_layout(train::Layout& layout, const CommonOptions& c, const GPTConfig& cfg) {
  parallel::CapacityLifted lifted(current_rank().allocator);
  FullModel full(c, cfg);
  CheckpointInfo info = load_checkpoint(c.resume, full.model->params(), full.optimizer.get());
  for (train::TensorShard& s : layout.shards())
    copy_runs(s.local, full.by_name.at(s.full_name), s.runs);
  layout.optimizer()->set_step_count(full.optimizer->step_count());
  return static_cast<int>(info.step);
}

struct Gathered {
  std::mutex mutex;
  std::map<std::string, std::vector<float>> values;  // full tensors, written by the writers
};

void save_gathered(train::Layout& layout, const CommonOptions& c, const GPTConfig& cfg,
                   Gathered& gathered, comm::Comm& world, int steps) {
  {
    std::lock_guard lock(gathered.mutex);
    for (const train::TensorShard& s : layout.shards()) {
      if (!s.writer) continue;
      int64_t numel = 1;
      for (int64_t d : s.full_shape) numel *= d;
      auto& full = gathered.values[s.full_name];
      full.resize(static_cast<size_t>(numel));
      const std::vector<float> local = s.local.to_vector();
      size_t pos = 0;
      for (const train::ShardRun& run : s.runs)
        for (int64_t i = 0; i < run.length; ++i)
          full[static_cast<size_t>(run.full_offset + i)] = local[pos++];
    }
  }
  world.barrier();  // every rank's shards are in
  if (world.rank() != 0) return;
  parallel::CapacityLifted lifted(current_rank().allocator);
  FullModel full(c, cfg);
  for (auto& [name, tensor] : full.by_name)
    tensor.copy_from(Tensor::from(tensor.shape(), gathered.values.at(name)));
  full.optimizer->set_step_count(layout.optimizer()->step_count());
  save_checkpoint(c.checkpoint, full.model->params(), full.optimizer.get(), steps, c.to_json());
}

}  // namespace

// ---- the run -------------------------------------------------------------------------------

TensorParallelResult train_tensor_parallel(const CommonOptions& c, std::ostream& out) {
  WorldOptions wopt = c.world_options();
  auto task = make_task(c);
  GPTConfig cfg = model_config(c, *task);
  parallel::check_tp_size(cfg, c.ranks);  // one line naming the sizes that work
  if (c.device == "phantom" && (!c.checkpoint.empty() || !c.resume.empty()))
    throw UsageError("a phantom run has no values to save or load: drop --checkpoint/--resume");
  World world(wopt);
  if (world.is_mpi() && c.ranks > 1 && (!c.checkpoint.empty() || !c.resume.empty()))
    throw UsageError(
        "--checkpoint/--resume of tensor_parallel under mpirun needs the shared trainer "
        "(core/train): run it without mpirun for now");

  TensorParallelResult result;
  Gathered gathered;
  world.run([&](RankContext& ctx) {
    parallel::Mesh mesh(*ctx.comm, {.tp = c.ranks});
    parallel::TensorParallel layout(cfg, mesh.group(parallel::Axis::tp),
                                    [&](const ParamList& p) { return make_optimizer(c, p); });
    int first_step = c.resume.empty() ? 0 : resume_layout(layout, c, cfg);
    ctx.allocator.reset_peaks();  // what training needs, not the set-up's full copy
    const bool narrator = ctx.rank == 0;
    if (narrator && !c.quiet) {
      if (first_step > 0) fmt::print(out, "resumed from {} at step {}\n", c.resume, first_step);
      fmt::print(out, "model:  {}\n", describe_model(cfg, count_params(cfg)));
      fmt::print(out,
                 "split:  tp={}: each GPU holds {} of {} heads and {} of {} MLP units per block\n",
                 c.ranks, cfg.heads / c.ranks, cfg.heads, 4 * cfg.dim / c.ranks, 4 * cfg.dim);
      fmt::print(out, "data:   {} task, the same {} sequences x {} tokens on every GPU\n",
                 task->name(), c.batch, c.seq);
      fmt::print(out, "device: {}\n", describe_world(wopt));
      fmt::print(out, "optim:  {} lr {}\n\n", c.optimizer, c.lr);
    }
    // Interim training loop: the one trainer (core/train/trainer) replaces it at merge.
    LossLog log(c, out);
    for (int step = first_step; step < c.steps; ++step) {
      StepScope scope(step);
      const double start = ctx.clock.compute_now();
      train::StepOutcome outcome = layout.step(task->sample(step, c.batch, c.seq), step);
      if (narrator) {
        result.step_seconds = ctx.clock.compute_now() - start;
        log.record(step, outcome.loss.value_or(0.0f));
      }
    }
    if (!c.checkpoint.empty()) save_gathered(layout, c, cfg, gathered, *ctx.comm, c.steps);
    if (narrator) {
      result.losses = log.losses();
      result.local_params = layout.model().num_params();
      result.memory = ctx.allocator.stats();
      if (!c.checkpoint.empty())
        fmt::print(out, "\ncheckpoint: {} (the gathered full model + {} state, step {})\n",
                   c.checkpoint, c.optimizer, c.steps);
    }
  });
  nlohmann::json meta = {{"lesson", "tensor_parallel"}, {"config", c.to_json()}};
  result.trace = world.collect_trace(meta);
  result.under_mpi = world.is_mpi();
  return result;
}

// ---- the report ----------------------------------------------------------------------------

namespace {

void print_communication(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                         const trace::Trace& trace) {
  const trace::Interval window = trace::analyze(trace, last_step(trace)).window;
  int count = 0;
  int64_t bytes = 0, first = -1;
  bool same_size = true;
  for (const trace::Event& e : trace.events) {
    if (e.rank != 0 || e.lane != trace::Lane::comm || e.op != "all_reduce" || e.group != "tp0")
      continue;
    if (e.start < window.begin || e.start >= window.end) continue;
    ++count;
    bytes += e.bytes;
    if (first < 0) first = e.bytes;
    same_size = same_size && e.bytes == first;
  }
  const int64_t btc = int64_t{c.batch} * c.seq * cfg.dim;
  const double t = c.ranks;
  fmt::print(out, "\ncommunication per step, rank 0, group tp0 (measured from the trace):\n");
  fmt::print(out,
             "  all-reduces  {} = {:.1f} per layer   formula: 2 forward (g) + 2 backward (f) = 4 "
             "per layer x {} layers = {}\n",
             count, double(count) / cfg.layers, cfg.layers, 4 * cfg.layers);
  fmt::print(out, "  each         {} elements{}   formula: B*T*C = {}*{}*{} = {}\n",
             with_commas(first / 4), same_size ? "" : " (sizes differ!)", c.batch, c.seq, cfg.dim,
             with_commas(btc));
  fmt::print(out, "  all-reduced  {} per step\n", format_bytes(bytes));
  fmt::print(out,
             "  on the wire  ring: 2(t-1)/t x {} = {} sent per GPU per step (computed from the "
             "ring's formula){}\n",
             format_bytes(bytes),
             format_bytes(static_cast<int64_t>(2 * (t - 1) / t * double(bytes))),
             c.ranks == 1 ? "; tp=1 sends nothing" : "");
}

void print_memory_split(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                        const TensorParallelResult& r) {
  const TpParamCount n = tp_param_count(cfg);
  const int64_t local = n.per_rank(c.ranks);
  const int ob = optimizer_bytes_per_param(c.optimizer);
  auto peak = [&](MemCategory m) { return r.memory.peak[static_cast<int>(m)]; };
  fmt::print(out, "\nmemory per GPU, rank 0 (measured by the allocator vs formula):\n");
  fmt::print(out, "  parameters held  {} (measured)   formula: {} replicated + {} / {} = {}\n",
             with_commas(r.local_params), with_commas(n.replicated), with_commas(n.sharded),
             c.ranks, with_commas(local));
  fmt::print(out, "  {:<16} {:>12} {:>12}   {}\n", "", "measured", "formula", "(1 GPU)");
  auto row = [&](const char* what, MemCategory m, int bytes_per_param) {
    fmt::print(out, "  {:<16} {:>12} {:>12}   ({} = {} B x {} params)\n", what,
               format_bytes(peak(m)), format_bytes(int64_t{bytes_per_param} * local),
               format_bytes(int64_t{bytes_per_param} * (n.replicated + n.sharded)), bytes_per_param,
               with_commas(n.replicated + n.sharded));
  };
  row("weights", MemCategory::parameters, 4);
  row("gradients", MemCategory::gradients, 4);
  row(c.optimizer == "sgd" ? "sgd momentum" : "adamw m + v", MemCategory::optimizer_state, ob);
  fmt::print(out, "  {:<16} {:>12}   (activations: only the heads' and MLP units' share shrinks)\n",
             "activations", format_bytes(peak(MemCategory::activations)));
  fmt::print(out, "  {:<16} {:>12}\n", "all at once", format_bytes(r.memory.peak_total));
}

// The Adam question: the run did not fit. Say why, and find the tp at which it fits again.
void explain_out_of_memory(std::ostream& out, const CommonOptions& c, const GPTConfig& cfg,
                           const OutOfMemory& oom) {
  const TpParamCount n = tp_param_count(cfg);
  const int64_t local = n.per_rank(c.ranks);
  const int ob = optimizer_bytes_per_param(c.optimizer);
  fmt::print(out, "\nout of memory at tp={} with {} (capacity {} per GPU):\n", c.ranks, c.optimizer,
             c.capacity.empty() ? "the profile's" : c.capacity);
  fmt::print(
      out,
      "  per GPU: {} params x (4 B weights + 4 B gradients + {} B {}) = {} before activations\n",
      with_commas(local), ob, c.optimizer == "sgd" ? "momentum" : "AdamW m and v",
      format_bytes(local * (8 + ob)));
  fmt::print(out,
             "  AdamW keeps 8 B/param of state (two moments) where momentum SGD keeps 4: {} "
             "more per GPU\n",
             format_bytes(local * 4));
  fmt::print(out, "  allocator when it failed:\n{}\n", oom.what());
  // Try larger tp sizes on the phantom device (shapes and bytes only, one step each).
  for (int tp = c.ranks + 1; tp <= std::min(64, cfg.heads); ++tp) {
    if (cfg.heads % tp != 0 || (4 * cfg.dim) % tp != 0) continue;
    CommonOptions probe = c;
    probe.ranks = tp;
    probe.device = "phantom";
    probe.clock = "modeled";
    probe.steps = 1;
    probe.quiet = true;
    probe.checkpoint.clear();
    probe.resume.clear();
    probe.trace_path.clear();
    try {
      std::ostringstream ignored;
      train_tensor_parallel(probe, ignored);
      fmt::print(out,
                 "  {} fits again at tp={}: {} params per GPU (checked by a one-step phantom run "
                 "at the same capacity)\n",
                 c.optimizer, tp, with_commas(n.per_rank(tp)));
      return;
    } catch (const RankError& e) {
      bool out_of_memory = false;
      try {
        if (e.cause()) std::rethrow_exception(e.cause());
      } catch (const OutOfMemory&) {
        out_of_memory = true;
      } catch (...) {
      }
      if (!out_of_memory) {
        fmt::print(out, "  (could not probe tp={} here: {})\n", tp, e.what());
        return;
      }
    } catch (const std::exception& e) {  // e.g. under mpirun, where the world size is fixed
      fmt::print(out, "  (could not probe tp={} here: {})\n", tp, e.what());
      return;
    }
  }
  fmt::print(out, "  no tp up to {} heads fits: raise --capacity or shrink the model\n", cfg.heads);
}

class TensorParallelLesson : public Lesson {
 public:
  std::string name() const override { return "tensor_parallel"; }
  std::string summary() const override {
    return "Megatron TP: heads and MLP split over GPUs, 4 all-reduces per layer, weights at 1/t";
  }
  LessonDefaults defaults() const override { return {.ranks = 2, .steps = 20, .batch = 8}; }

  int run(const CommonOptions& c, std::ostream& out) override {
    fmt::print(out, "== tensor_parallel: every block split over {} GPUs (Megatron column/row) ==\n",
               c.ranks);
    auto task = make_task(c);
    const GPTConfig cfg = model_config(c, *task);
    TensorParallelResult r;
    try {
      r = train_tensor_parallel(c, out);
    } catch (const RankError& e) {
      try {
        if (e.cause()) std::rethrow_exception(e.cause());
      } catch (const OutOfMemory& oom) {
        explain_out_of_memory(out, c, cfg, oom);
      } catch (...) {
      }
      throw;  // the CLI reports it (exit 2 for out of memory)
    }
    print_loss_summary(out, c, r.losses, " (the same global batch on every GPU)");
    print_communication(out, c, cfg, r.trace);
    print_memory_split(out, c, cfg, r);

    CommonOptions one = c;  // the same model and batch on one GPU, for the step time
    one.ranks = 1;
    one.steps = std::min(c.steps, 2);
    one.quiet = true;
    one.checkpoint.clear();
    one.resume.clear();
    one.trace_path.clear();
    one.capacity.clear();  // a timing reference: the profile's capacity, whatever --capacity says
    std::ostringstream ignored;
    const trace::TraceSummary s = trace::analyze(r.trace, last_step(r.trace));
    const trace::RankSummary& r0 = s.ranks.at(0);
    if (r.under_mpi) {  // the world size is fixed by mpirun: no one-GPU run in this process
      fmt::print(out,
                 "\nstep time: {} on {} GPUs (run `mgpu run tensor_parallel --ranks 1` without "
                 "mpirun for the 1-GPU reference)\n",
                 format_seconds(r.step_seconds), c.ranks);
    } else {
      const double one_step = train_tensor_parallel(one, ignored).step_seconds;
      fmt::print(out,
                 "\nstep time: {} on {} GPUs vs {} on 1 GPU (same profile, same batch): {:.2f}x "
                 "(ideal {}x)\n",
                 format_seconds(r.step_seconds), c.ranks, format_seconds(one_step),
                 one_step / r.step_seconds, c.ranks);
    }
    fmt::print(
        out,
        "  communication {} of the step is exposed: TP's all-reduces sit between the "
        "layers that need them, nothing hides them.\n  That is why TP stays inside a node "
        "(NVLink); try --profile docs/lessons/slow-1GBps.json to see it across a slow link.\n",
        format_seconds(r0.exposed_comm));
    r.trace.metadata["predictions"]["all_reduces_per_step"] = 4 * cfg.layers;
    return finish_run(c, r.trace, name(), out);
  }
};

}  // namespace

std::unique_ptr<Lesson> make_tensor_parallel_lesson() {
  return std::make_unique<TensorParallelLesson>();
}

}  // namespace mgpu::lessons

#include "core/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/optim/optimizer.h"

namespace mgpu::train {

namespace {

// Tags of the trainer's own messages, after the last step (far from any paradigm's tags).
constexpr int kLossTag = 1 << 20;
constexpr int kShardHeaderTag = kLossTag + 1;
constexpr int kShardDataTag = kLossTag + 2;
constexpr int kStatsTag = kLossTag + 3;

// The bookkeeping after training (loss log, checkpoint gather) is not part of the lesson: it
// leaves no events on the timeline, so a run with --checkpoint draws the same trace as one without.
class UntracedScope {
 public:
  explicit UntracedScope(RankContext& ctx) : ctx_(ctx), was_(ctx.tracer.enabled) {
    ctx.tracer.enabled = false;
  }
  ~UntracedScope() { ctx_.tracer.enabled = was_; }
  UntracedScope(const UntracedScope&) = delete;
  UntracedScope& operator=(const UntracedScope&) = delete;

 private:
  RankContext& ctx_;
  bool was_;
};

// Floats travel exactly through every backend, so a small message is floats: a length, then
// the values. Text (a JSON description) goes one byte per float. The messages live in host
// memory outside the rank's allocator (a phantom tensor holds no values, and the bookkeeping
// must not show in the lesson's memory figures); on CUDA devices they are device tensors.
Allocator& host_memory() {
  static Allocator host(Device::cpu());
  return host;
}

Tensor message(int64_t n) {
  Allocator* where = current_rank().device.kind == DeviceKind::cuda ? nullptr : &host_memory();
  return Tensor::zeros({n}, MemCategory::comm_buffers, DType::f32, where);
}

void send_floats(comm::Comm& comm, const std::vector<float>& values, int dst, int tag) {
  Tensor size = message(1);
  size.fill(static_cast<float>(values.size()));
  comm.send(size, dst, tag);
  if (values.empty()) return;
  Tensor t = message(static_cast<int64_t>(values.size()));
  t.copy_from(Tensor::from(t.shape(), values, MemCategory::comm_buffers, &host_memory()));
  comm.send(t, dst, tag);
}

std::vector<float> recv_floats(comm::Comm& comm, int src, int tag) {
  Tensor size = message(1);
  comm.recv(size, src, tag);
  const auto n = static_cast<int64_t>(size.to_vector()[0]);
  if (n == 0) return {};
  Tensor values = message(n);
  comm.recv(values, src, tag);
  return values.to_vector();
}

std::vector<float> text_to_floats(const std::string& text) {
  return {text.begin(), text.end()};
}

std::string floats_to_text(const std::vector<float>& values) {
  std::string text;
  for (float v : values) text.push_back(static_cast<char>(static_cast<int>(v)));
  return text;
}

// One step's outcome on one rank, as four floats: has loss, loss, has shard loss, shard loss.
constexpr int kOutcomeFloats = 4;
void append_outcome(std::vector<float>& out, const StepOutcome& o) {
  out.insert(out.end(), {o.loss ? 1.0f : 0.0f, o.loss.value_or(0), o.shard_loss ? 1.0f : 0.0f,
                         o.shard_loss.value_or(0)});
}

// The global loss of each step from every rank's outcomes: the lowest rank that knows it, or
// the mean of the equal shards' losses.
std::vector<float> global_losses(const std::vector<std::vector<float>>& per_rank, int steps) {
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::optional<float> global;
    double shard_sum = 0;
    int shards = 0;
    for (const auto& rank : per_rank) {
      const float* o = rank.data() + kOutcomeFloats * s;
      if (o[0] != 0 && !global) global = o[1];
      if (o[2] != 0) shard_sum += o[3], ++shards;
    }
    losses.push_back(global ? *global : static_cast<float>(shards ? shard_sum / shards : 0.0));
  }
  return losses;
}

// Copies this rank's shards out of the full tensors of a checkpoint.
void restore_shards(Layout& layout, const CheckpointContents& ckpt, const std::string& path) {
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : ckpt.tensors) by_name[t.name] = &t;
  const bool parameters_only = ckpt.info.optimizer.is_null();
  for (TensorShard& shard : layout.shards()) {
    if (parameters_only && shard.kind == "optimizer_state") continue;  // stays fresh (zeros)
    auto it = by_name.find(shard.full_name);
    if (it == by_name.end())
      throw std::invalid_argument(fmt::format(
          "checkpoint '{}' has no tensor '{}' that this run needs (saved from another model or "
          "optimizer?)",
          path, shard.full_name));
    const CheckpointTensor& full = *it->second;
    if (full.shape != shard.full_shape)
      throw std::invalid_argument(
          fmt::format("checkpoint '{}' has {} {} but this model's is {} (another model?)", path,
                      full.name, shape_str(full.shape), shape_str(shard.full_shape)));
    if (!shard.local.has_data()) continue;  // phantom: shapes only
    std::vector<float> local;
    local.reserve(static_cast<size_t>(shard.local.numel()));
    for (const ShardRun& run : shard.runs)
      local.insert(local.end(), full.values.begin() + run.full_offset,
                   full.values.begin() + run.full_offset + run.length);
    Tensor values = Tensor::from(shard.local.shape(), local, MemCategory::workspace);
    if (shard.local.dtype() == DType::f32)
      shard.local.copy_from(values);
    else  // a bf16/fp16 parameter without master weights on this rank: rounded
      ops::convert(shard.local, values);
  }
  // fp16: the loss scale and its clean-step count continue where the saved run stopped (a
  // checkpoint from a run without loss scaling starts the scaler fresh).
  if (optim::LossScaler* scaler = layout.loss_scaler())
    if (ckpt.info.optimizer.is_object() && ckpt.info.optimizer.contains("loss_scaler"))
      scaler->load_state(ckpt.info.optimizer.at("loss_scaler"));
  // Mixed precision: the checkpoint held the fp32 master weights; the model gets them rounded.
  if (auto* mixed = dynamic_cast<optim::MixedPrecision*>(layout.optimizer()))
    mixed->copy_master_to_model();
  if (optim::Optimizer* opt = layout.optimizer()) {
    const nlohmann::json& saved = ckpt.info.optimizer;
    if (saved.is_null()) return;  // parameters only: the optimizer starts fresh
    if (saved.value("name", std::string("?")) != opt->name())
      throw std::invalid_argument(fmt::format("checkpoint '{}' holds {} state but this run uses {}",
                                              path, saved.value("name", std::string("?")),
                                              opt->name()));
    opt->set_step_count(saved.value("step_count", ckpt.info.step));
  }
}

// This rank's writer shards: a JSON description (names, shapes, runs) and their values in order.
std::pair<std::string, std::vector<float>> describe_writer_shards(Layout& layout) {
  nlohmann::json desc = nlohmann::json::array();
  std::vector<float> values;
  for (TensorShard& shard : layout.shards()) {
    if (!shard.writer) continue;
    nlohmann::json runs = nlohmann::json::array();
    for (const ShardRun& r : shard.runs) runs.push_back({r.full_offset, r.length});
    desc.push_back({{"name", shard.full_name},
                    {"kind", shard.kind},
                    {"shape", shard.full_shape},
                    {"runs", runs}});
    std::vector<float> v = shard.local.to_vector();
    values.insert(values.end(), v.begin(), v.end());
  }
  return {desc.dump(), std::move(values)};
}

// Rank 0: every rank's writer shards placed into full tensors, parameters first, each tensor in
// the order it first appears (rank 0's first). Every element must be written exactly once.
std::vector<CheckpointTensor> assemble(
    const std::vector<std::pair<std::string, std::vector<float>>>& per_rank) {
  std::vector<CheckpointTensor> tensors;
  std::map<std::string, size_t> index;
  std::vector<int64_t> covered;
  for (const auto& [text, values] : per_rank) {
    size_t at = 0;
    for (const nlohmann::json& d : nlohmann::json::parse(text)) {
      const std::string name = d.at("name");
      auto [it, fresh] = index.try_emplace(name, tensors.size());
      if (fresh) {
        Shape shape = d.at("shape").get<Shape>();
        tensors.push_back({name, d.at("kind"), shape,
                           std::vector<float>(static_cast<size_t>(shape_numel(shape)))});
        covered.push_back(0);
      }
      CheckpointTensor& t = tensors[it->second];
      for (const nlohmann::json& run : d.at("runs")) {
        const int64_t offset = run[0], length = run[1];
        if (offset < 0 || offset + length > static_cast<int64_t>(t.values.size()) ||
            at + length > values.size())
          throw std::logic_error(
              fmt::format("checkpoint gather: a shard of '{}' lies outside it", name));
        std::copy_n(values.begin() + static_cast<int64_t>(at), length, t.values.begin() + offset);
        at += static_cast<size_t>(length);
        covered[it->second] += length;
      }
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (covered[i] != static_cast<int64_t>(tensors[i].values.size()))
      throw std::logic_error(fmt::format(
          "checkpoint gather: the ranks' writer shards cover {} of the {} elements of '{}'",
          covered[i], tensors[i].values.size(), tensors[i].name));
  std::stable_partition(tensors.begin(), tensors.end(),
                        [](const CheckpointTensor& t) { return t.kind == "param"; });
  return tensors;
}

// Every rank trains on the same global batch, a pure function of the step: the rank threads of a
// process share one copy per step instead of each sampling (and holding) its own. The last rank
// to take a step's batch drops it from the cache; each rank keeps its pointer while it trains.
class SharedBatches {
 public:
  SharedBatches(const data::Task& task, const TrainOptions& options, int ranks)
      : task_(task), options_(options), ranks_(ranks) {}

  std::shared_ptr<const data::Batch> take(int step) {
    std::lock_guard lock(mutex_);
    Entry& entry = by_step_[step];
    if (!entry.batch)
      entry.batch = std::make_shared<const data::Batch>(
          task_.sample(step, options_.global_batch, options_.seq));
    std::shared_ptr<const data::Batch> batch = entry.batch;
    if (++entry.taken == ranks_) by_step_.erase(step);
    return batch;
  }

 private:
  struct Entry {
    std::shared_ptr<const data::Batch> batch;
    int taken = 0;
  };
  const data::Task& task_;
  const TrainOptions& options_;
  const int ranks_;
  std::mutex mutex_;
  std::map<int, Entry> by_step_;
};

// The run's model and the checkpoint's, field by field (both given): heads 8 and heads 4 make the
// same shapes but another model, which only this comparison tells apart.
void check_same_model(const TrainOptions& options, const CheckpointInfo& saved) {
  if (!options.model.is_object() || !saved.model.is_object()) return;
  for (const auto& [field, mine] : options.model.items()) {
    if (!saved.model.contains(field) || saved.model[field] == mine) continue;
    const std::string theirs = saved.model[field].dump().substr(0, 40);
    throw std::invalid_argument(fmt::format(
        "checkpoint '{}' holds the parameters of a model with {} {}, but this run's has {} {}: "
        "resume with --{} {} (the options it was saved with)",
        options.resume, field, theirs, field, mine.dump(), field, theirs));
  }
}

// What most likely made a run diverge, from the optimizer's hyper-parameters and the state it
// resumed from (the usual ranges are those of small GPT training; Loshchilov & Hutter 2019).
std::string likely_cause(Layout& layout, const TrainOptions& options,
                         const CheckpointContents& resumed) {
  if (const optim::Optimizer* opt = layout.optimizer()) {
    const nlohmann::json h = opt->hyperparams();
    const double lr = h.value("lr", 0.0), wd = h.value("weight_decay", 0.0);
    if (lr > 0.1) return fmt::format("--lr {:g} is far above the usual 1e-4..1e-2", lr);
    if (wd > 1.0 || lr * wd > 0.1)
      return fmt::format("--weight-decay {:g} is far above the usual 0..0.1", wd);
  }
  float largest = 0;
  for (const CheckpointTensor& t : resumed.tensors)
    for (float v : t.values) largest = std::max(largest, std::abs(v));
  if (!options.resume.empty() && largest > 1e6f)
    return fmt::format("the checkpoint it resumed from, '{}', holds values up to {:g}",
                       options.resume, largest);
  return "the learning rate is too high for this model and data: try a smaller --lr";
}

// After a step: a non-finite loss this rank knows, or a non-finite parameter this rank holds
// (where a NaN gradient lands after the update), stops the run. Each rank checks what it holds;
// a NaN reaches every rank's parameters through the same step's gradients, and a rank that
// stops first ends the others' waits (World::run). A skipped fp16 step changed no parameter, but
// its loss is still checked: the forward pass is not scaled, so a non-finite loss means the
// weights themselves overflowed, which halving the loss scale cannot undo.
void check_finite(int step, const StepOutcome& outcome, Layout& layout, const TrainOptions& options,
                  const CheckpointContents& resumed) {
  std::string what;
  for (const std::optional<float>& loss : {outcome.loss, outcome.shard_loss})
    if (loss && !std::isfinite(*loss)) what = fmt::format("the loss is {}", *loss);
  if (what.empty() && !outcome.skipped)
    for (TensorShard& shard : layout.shards()) {
      if (shard.kind != "param" || !shard.local.has_data()) continue;
      const std::vector<float> values = shard.local.to_vector();
      if (!std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); })) {
        what = fmt::format("parameter '{}' holds NaN or inf after the update", shard.full_name);
        break;
      }
    }
  if (what.empty()) return;
  throw TrainingDiverged(
      fmt::format("training diverged at step {}: {}; likely cause: {} (no checkpoint written)",
                  step + 1, what, likely_cause(layout, options, resumed)));
}

}  // namespace

std::vector<TensorShard> partitioned_shards(const ParamList& params, optim::Optimizer* optimizer,
                                            const WritesFn& writes) {
  std::vector<TensorShard> shards;
  auto place = [&](const std::string& name, const std::string& kind, const Param& p,
                   const PartitionSpec& spec, const Tensor& local) {
    // A parameter keeps its full shape; its optimizer state is flat ([numel]) in the full model.
    const Shape full = kind == "param" ? spec.full_shape : Shape{spec.full_numel()};
    shards.push_back({name, kind, full, spec.runs, local, writes(p)});
  };
  // Mixed precision: the fp32 master weights are the parameters a checkpoint stores (under the
  // parameters' names, as single_device fp32 would), not their 2-byte rounding in the model.
  auto* mixed = dynamic_cast<optim::MixedPrecision*>(optimizer);
  const ParamList masters = mixed ? mixed->master_params() : params;
  if (masters.size() != params.size())
    throw std::logic_error("partitioned_shards: master weights do not match the parameters");
  for (size_t i = 0; i < params.size(); ++i)
    place(params[i]->name, "param", *params[i], params[i]->spec, masters[i]->data);
  if (!optimizer) return shards;
  for (const optim::NamedTensor& s : optimizer->state()) {
    if (mixed && s.name.rfind("master.", 0) == 0) continue;  // stored above as the params
    if (s.slice < 0) throw std::logic_error("optimizer state " + s.name + " names no slice");
    const optim::ParamSlice& slice = optimizer->slices()[static_cast<size_t>(s.slice)];
    const Param& p = *slice.param;
    place(s.name.substr(0, s.name.find('[')), "optimizer_state", p,
          slice.whole() ? p.spec : p.spec.chunk(slice.begin, slice.end), s.tensor);
  }
  return shards;
}

std::vector<TensorShard> whole_tensor_shards(const ParamList& params, optim::Optimizer* optimizer,
                                             bool writer) {
  return partitioned_shards(params, optimizer, [writer](const Param&) { return writer; });
}

std::vector<std::vector<int64_t>> gather_to_root(RankContext& ctx,
                                                 const std::vector<int64_t>& values) {
  // An int64 travels as two floats of 24 bits each (exact); enough for byte counts < 2^48.
  auto encode = [](const std::vector<int64_t>& v) {
    std::vector<float> f;
    for (int64_t x : v)
      f.insert(f.end(), {static_cast<float>(x >> 24), static_cast<float>(x & 0xFFFFFF)});
    return f;
  };
  auto decode = [](const std::vector<float>& f) {
    std::vector<int64_t> v;
    for (size_t i = 0; i + 1 < f.size(); i += 2)
      v.push_back((static_cast<int64_t>(f[i]) << 24) + static_cast<int64_t>(f[i + 1]));
    return v;
  };
  UntracedScope untraced(ctx);
  comm::Comm& comm = *ctx.comm;
  if (comm.rank() != 0) {
    send_floats(comm, encode(values), 0, kStatsTag);
    return {};
  }
  std::vector<std::vector<int64_t>> all{values};
  for (int r = 1; r < comm.size(); ++r) all.push_back(decode(recv_floats(comm, r, kStatsTag)));
  return all;
}

CheckpointContents read_resume_checkpoint(const TrainOptions& options) {
  CheckpointContents ckpt = load_checkpoint_tensors(options.resume);
  check_same_model(options, ckpt.info);
  if (options.model_params >= 0) {
    int64_t saved = 0;
    for (const CheckpointTensor& t : ckpt.tensors)
      if (t.kind == "param") saved += static_cast<int64_t>(t.values.size());
    if (saved != options.model_params)
      throw std::invalid_argument(fmt::format(
          "checkpoint '{}' holds a model of {} parameters but this run's has {}: resume with the "
          "options it was saved with (its header has them)",
          options.resume, saved, options.model_params));
  }
  if (ckpt.info.step >= options.steps)
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' is already at step {}: ask for more --steps than that to "
                    "continue training",
                    options.resume, ckpt.info.step));
  return ckpt;
}

TrainResult train(World& world, const data::Task& task, const TrainOptions& options,
                  const LayoutFactory& factory, const LossCallback& on_loss,
                  const RankDone& on_done) {
  const bool phantom = world.options().device == DeviceKind::phantom;
  if (phantom && !options.checkpoint.empty())
    throw std::invalid_argument(
        "--checkpoint needs parameter values, and the phantom device has none: drop --checkpoint "
        "or use --device cpu");
  CheckpointContents resume;
  TrainResult result;
  if (!options.resume.empty()) {
    resume = read_resume_checkpoint(options);
    result.first_step = static_cast<int>(resume.info.step);
  }
  const int first = result.first_step;
  const int steps_run = options.steps - first;

  std::mutex mutex;
  std::vector<bool> reported(static_cast<size_t>(std::max(steps_run, 0)), false);
  SharedBatches batches(task, options, static_cast<int>(world.local_ranks().size()));
  world.run([&](RankContext& ctx) {
    std::unique_ptr<Layout> layout = factory(ctx);
    if (options.loss_scaling) layout->enable_loss_scaling(*options.loss_scaling);
    if (!options.resume.empty()) restore_shards(*layout, resume, options.resume);
    if (ctx.rank == 0 && !options.resume.empty() && resume.info.optimizer.is_null() &&
        layout->optimizer()) {
      std::lock_guard lock(mutex);
      result.fresh_optimizer = true;
    }

    std::vector<float> outcomes;  // 4 floats per step (append_outcome)
    std::vector<int> skipped;
    for (int step = first; step < options.steps; ++step) {
      const std::shared_ptr<const data::Batch> batch = batches.take(step);
      layout->before_step(step);
      StepOutcome outcome;
      const optim::LossScaler* scaler = layout->loss_scaler();
      const int64_t skipped_before = scaler ? scaler->skipped_steps() : 0;
      const int64_t calls_before = layout->optimizer_steps_called();
      {
        StepScope scope(step);
        outcome = layout->step(*batch, step);
      }
      if (scaler && layout->optimizer_steps_called() == calls_before)
        throw std::invalid_argument(fmt::format(
            "--precision fp16 needs dynamic loss scaling, which the {} layout does not run yet "
            "(train::Layout::optimizer_step): use --precision bf16 (same memory, no scaler)",
            layout->name()));
      if (scaler && scaler->skipped_steps() > skipped_before) outcome.skipped = true;
      if (outcome.skipped) skipped.push_back(step);
      check_finite(step, outcome, *layout, options, resume);
      append_outcome(outcomes, outcome);
      if (outcome.loss && on_loss && world.is_root()) {
        std::lock_guard lock(mutex);
        if (!reported[step - first]) reported[step - first] = true, on_loss(step, *outcome.loss);
      }
    }
    if (on_done) on_done(ctx, *layout);
    // Every rank skipped the same steps. (Phantom devices hold no values: nothing overflows, so
    // there is nothing to report.)
    if (ctx.rank == 0 && layout->loss_scaler() && ctx.device.has_data()) {
      std::lock_guard lock(mutex);
      result.skipped_steps = skipped;
      result.loss_scale = layout->loss_scaler()->scale();
    }

    UntracedScope untraced(ctx);
    comm::Comm& comm = *ctx.comm;
    if (ctx.device.has_data()) {  // the loss log, gathered to rank 0
      if (ctx.rank != 0) {
        send_floats(comm, outcomes, 0, kLossTag);
      } else {
        std::vector<std::vector<float>> per_rank{outcomes};
        for (int r = 1; r < comm.size(); ++r) per_rank.push_back(recv_floats(comm, r, kLossTag));
        std::lock_guard lock(mutex);
        result.losses = global_losses(per_rank, steps_run);
      }
    } else if (ctx.rank == 0) {
      result.losses.assign(static_cast<size_t>(steps_run), 0.0f);  // phantom: timing only
    }
    if (!options.checkpoint.empty()) {  // the full model, gathered to rank 0
      auto [text, values] = describe_writer_shards(*layout);
      if (ctx.rank != 0) {
        send_floats(comm, text_to_floats(text), 0, kShardHeaderTag);
        send_floats(comm, values, 0, kShardDataTag);
      } else {
        std::vector<std::pair<std::string, std::vector<float>>> per_rank{{text, values}};
        for (int r = 1; r < comm.size(); ++r) {  // header first, then data: the order they come
          std::string header = floats_to_text(recv_floats(comm, r, kShardHeaderTag));
          per_rank.emplace_back(std::move(header), recv_floats(comm, r, kShardDataTag));
        }
        nlohmann::json hyper = nullptr;
        if (const optim::Optimizer* opt = layout->optimizer()) {
          hyper = opt->hyperparams();
          hyper["step_count"] = opt->step_count();
        }
        if (const optim::LossScaler* scaler = layout->loss_scaler())
          hyper["loss_scaler"] = scaler->state();
        save_checkpoint_tensors(options.checkpoint, assemble(per_rank), options.steps,
                                options.config, hyper, options.model);
        result.checkpoint_written = true;
      }
    }
  });
  if (on_loss && world.is_root())
    for (int s = 0; s < steps_run && s < static_cast<int>(result.losses.size()); ++s)
      if (!reported[s]) on_loss(first + s, result.losses[s]);
  return result;
}

}  // namespace mgpu::train

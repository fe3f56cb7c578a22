// Checkpoints as the trainer sees them: the shards each rank holds (parameters, fp32 masters,
// optimizer state) as parts of full tensors, written by gathering them to rank 0 and read back by
// copying each rank's parts out of the full tensors.
#include "core/train/checkpoint_shards.h"

#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/optim/optimizer.h"

namespace mgpu::train {

namespace {

// The run's model and the checkpoint's, field by field (both given): heads 8 and heads 4 make the
// same shapes but another model, which only this comparison tells apart.
void check_same_model(const TrainOptions& options, const CheckpointInfo& saved) {
  if (!options.model.is_object() || !saved.model.is_object()) return;
  // A dense model's header has no "experts" field: it is 0, and a difference names it.
  const auto experts_of = [](const nlohmann::json& m) -> std::string {
    const auto it = m.find("experts");
    return it == m.end() ? "0" : it->dump().substr(0, 40);
  };
  if (experts_of(saved.model) != experts_of(options.model))
    throw std::invalid_argument(fmt::format(
        "checkpoint '{}' holds the parameters of a model with experts {}, but this run's has "
        "experts {}: resume with --experts {} (the options it was saved with; 0 is the dense "
        "model)",
        options.resume, experts_of(saved.model), experts_of(options.model),
        experts_of(saved.model)));
  for (const auto& [field, mine] : options.model.items()) {
    if (!saved.model.contains(field) || saved.model[field] == mine) continue;
    const std::string theirs = saved.model[field].dump().substr(0, 40);
    throw std::invalid_argument(fmt::format(
        "checkpoint '{}' holds the parameters of a model with {} {}, but this run's has {} {}: "
        "resume with --{} {} (the options it was saved with)",
        options.resume, field, theirs, field, mine.dump(), field, theirs));
  }
}

}  // namespace

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
  if (optim::Optimizer* opt = layout.optimizer())
    if (optim::MixedPrecision* mixed = opt->mixed_precision()) mixed->copy_master_to_model();
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
std::vector<std::pair<std::string, std::vector<float>>> gather_writer_shards(comm::Comm& comm,
                                                                             Layout& layout,
                                                                             int header_tag,
                                                                             int data_tag) {
  auto [text, values] = describe_writer_shards(layout);
  if (comm.rank() != 0) {
    comm::send_values(comm, std::vector<uint8_t>(text.begin(), text.end()), 0, header_tag);
    comm::send_values(comm, values, 0, data_tag);
    return {};
  }
  std::vector<std::pair<std::string, std::vector<float>>> per_rank{{text, values}};
  for (int r = 1; r < comm.size(); ++r) {  // header first, then data: the order they come
    const std::vector<uint8_t> header = comm::recv_values<uint8_t>(comm, r, header_tag);
    per_rank.emplace_back(std::string(header.begin(), header.end()),
                          comm::recv_values<float>(comm, r, data_tag));
  }
  return per_rank;
}

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
  optim::MixedPrecision* mixed = optimizer ? optimizer->mixed_precision() : nullptr;
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

}  // namespace mgpu::train

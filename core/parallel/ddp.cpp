// DDP step, top to bottom (see ddp.h for the idea):
//   forward on my shard -> backward layer by layer, in reverse -> after each layer, mark its
//   gradients final and launch every bucket that became ready -> wait for all buckets -> optimizer.
#include "core/parallel/ddp.h"

#include <stdexcept>
#include <utility>

#include "core/data/sampler.h"
#include "core/parallel/layerwise.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

namespace {
ParamList collect(auto& layer) {
  ParamList list;
  layer.collect(list);
  return list;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(GPT& model, comm::Comm& comm, DdpOptions options,
                                                 DdpSeams seams)
    : model_(model), comm_(comm), options_(options), seams_(std::move(seams)) {
  if (!seams_.assign_buckets || !seams_.bucket_ready)
    throw std::logic_error(
        "DDP needs exercise 02's assign_buckets and bucket_ready: pass reference::seams().ddp or "
        "mine::seams().ddp");
  if (options_.bucket_bytes <= 0)
    throw std::invalid_argument("DDP bucket size must be positive, got " +
                                std::to_string(options_.bucket_bytes) + " bytes");
  // Backward finishes the head first, then the blocks from last to first, then the embedding.
  auto add_layer = [&](const ParamList& params) {
    layer_grads_.emplace_back();
    for (Param* p : params) {
      layer_grads_.back().push_back(static_cast<int>(grads_in_backward_order_.size()));
      grads_in_backward_order_.push_back(p);
    }
  };
  add_layer(collect(model_.head));
  for (size_t i = model_.blocks.size(); i-- > 0;) add_layer(collect(model_.blocks[i]));
  add_layer(collect(model_.embedding));
  grad_final_.assign(grads_in_backward_order_.size(), false);
  if (!options_.overlap) return;  // per-tensor all-reduce: gradients stay where they are

  std::vector<int64_t> bytes;
  for (Param* p : grads_in_backward_order_) bytes.push_back(p->grad.bytes());
  plan_ = seams_.assign_buckets(bytes, options_.bucket_bytes);
  // Gradient-as-bucket-view: each grad becomes a slice of its bucket's flat buffer, so backward
  // writes straight into the buffer that is all-reduced (no copy in, no copy out).
  for (const auto& bucket : plan_.buckets) {
    int64_t numel = 0;
    for (int i : bucket) numel += grads_in_backward_order_[i]->grad.numel();
    Tensor buffer = Tensor::zeros({numel}, MemCategory::gradients);
    int64_t offset = 0;
    for (int i : bucket) {
      Param* p = grads_in_backward_order_[i];
      Tensor view = buffer.flat_range(offset, offset + p->grad.numel()).reshape(p->grad.shape());
      view.copy_from(p->grad);
      p->grad = view;
      offset += view.numel();
    }
    bucket_buffers_.push_back(buffer);
  }
}

int64_t DistributedDataParallel::gradient_bytes() const {
  int64_t total = 0;
  for (Param* p : grads_in_backward_order_) total += p->grad.bytes();
  return total;
}

float DistributedDataParallel::forward_backward(const data::Batch& batch, bool sync,
                                                float grad_scale) {
  GPTActivations acts = GPTActivations::allocate(model_.config(), batch.B, batch.T);
  float loss;
  {
    ComputeScope s({.name = "forward", .cat = trace::cat::forward});
    loss = model_.forward(batch.tokens, batch.targets, acts, grad_scale);
  }
  std::fill(grad_final_.begin(), grad_final_.end(), false);
  next_bucket_ = 0;
  // Backward layer by layer, so buckets can launch between layers. layer_grads_ is in backward
  // order (head first), the hooks count layers in forward order (embedding first).
  const int last_layer = layer_count(model_) - 1;
  LayerHooks hooks{.after_backward = [&](int layer) {
    backward_layer_done(layer_grads_[last_layer - layer], sync);
  }};
  backward_by_layer(model_, batch, acts, hooks);

  if (sync && !options_.overlap)  // after backward, one blocking all-reduce per tensor
    for (Param* p : grads_in_backward_order_) comm_.all_reduce(p->grad, comm::ReduceOp::avg);
  return loss;
}

void DistributedDataParallel::backward_layer_done(const std::vector<int>& grads, bool sync) {
  for (int i : grads) grad_final_[i] = true;
  if (sync && options_.overlap) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  // In plan order only: collectives must be issued in the same order on every rank.
  while (next_bucket_ < plan_.buckets.size() &&
         seams_.bucket_ready(plan_, static_cast<int>(next_bucket_), grad_final_)) {
    in_flight_.push_back(
        comm_.all_reduce_async(bucket_buffers_[next_bucket_], comm::ReduceOp::avg));
    ++next_bucket_;
  }
}

void DistributedDataParallel::wait_for_gradients() {
  if (options_.overlap && next_bucket_ != plan_.buckets.size())
    throw std::logic_error("DDP: backward finished but bucket " + std::to_string(next_bucket_) +
                           " of " + std::to_string(plan_.buckets.size()) +
                           " never became ready (is every gradient in some bucket?)");
  for (comm::Work& w : in_flight_) w.wait();
  in_flight_.clear();
}

DdpPart::DdpPart(comm::Comm& dp, DdpOptions options, int accum, int shard_index,
                 const DdpSeams& seams)
    : dp_(dp), options_(options), accum_(accum), shard_index_(shard_index), seams_(seams) {}

void DdpPart::attach(GPT& model, TracePhase&) {
  ddp_ = std::make_unique<DistributedDataParallel>(model, dp_, options_, seams_);
}

data::Batch DdpPart::share(const data::Batch& global_batch) {
  last_shard_ = data::split_micro_batches(global_batch, dp_.size())[shard_index_];
  return last_shard_;
}

// k micro-steps on this rank's shard, communicating only on the last.
std::optional<float> DdpPart::forward_backward(GPT&, const data::Batch& mine, TracePhase&,
                                               float loss_scale) {
  float loss = 0;
  std::vector<data::Batch> micro = data::split_micro_batches(mine, accum_);
  for (int m = 0; m < accum_; ++m) {
    bool last = m + 1 == accum_;  // earlier micro-steps only accumulate locally
    loss += ddp_->forward_backward(micro[m], /*sync=*/last, loss_scale / accum_) / accum_;
  }
  return loss;
}

void DdpPart::report(train::RankReport& report) const {
  report.ddp = train::DdpFigures{.buckets = static_cast<int>(ddp_->plan().buckets.size()),
                                 .last_shard = last_shard_};
}

void DdpPart::synchronise(GPT&) {
  ddp_->wait_for_gradients();
}

std::unique_ptr<MeshLayout> ddp_layout(const GPTConfig& config, comm::Comm& dp, DdpOptions options,
                                       int accum, const train::OptimizerFactory& make_optimizer,
                                       int shard_index, const DdpSeams& seams) {
  return std::make_unique<MeshLayout>(
      config, std::make_unique<DdpPart>(dp, options, accum, shard_index, seams), make_optimizer);
}

}  // namespace mgpu::parallel

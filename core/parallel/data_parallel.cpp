// Naive data parallelism, one step top to bottom (see data_parallel.h for the idea):
//   scatter shards -> broadcast parameters -> forward/backward on every rank -> gradients to
//   rank 0, summed there -> rank 0 averages and updates.
#include "core/parallel/data_parallel.h"

#include <stdexcept>

#include "core/data/sampler.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"
#include "core/train/forward_backward.h"

namespace mgpu::parallel {

namespace {
constexpr int kDriver = 0;
constexpr int kTagShape = 1, kTagTokens = 2, kTagTargets = 3, kTagGrad = 4, kTagLoss = 5;

// The batch's shape, token ids and the loss are control messages the driver's host program
// sends, not device data: they live in host memory, so they carry values even when the ranks'
// devices are phantom (shapes only): host messages, the shape and the ids as int32, the loss
// as f32.
}  // namespace

DataParallel::DataParallel(GPT& model, comm::Comm& comm) : model_(model), comm_(comm) {}

float DataParallel::forward_backward(const data::Batch* global_batch, float grad_scale) {
  if (comm_.rank() == kDriver && !global_batch)
    throw std::invalid_argument("DataParallel: rank 0 drives and needs the batch");
  data::Batch shard = scatter_batch(global_batch);
  broadcast_parameters();
  const float loss = train::forward_backward_traced(model_, shard, grad_scale);
  return reduce_gradients_to_driver(loss);
}

data::Batch DataParallel::scatter_batch(const data::Batch* global_batch) {
  const int ranks = comm_.size();
  if (comm_.rank() != kDriver) {
    int32_t shape[2] = {0, 0};  // [B, T] of my shard
    comm_.recv_host({shape, 2, comm::HostType::i32}, kDriver, kTagShape);
    data::Batch shard;
    shard.B = shape[0];
    shard.T = shape[1];
    shard.tokens.resize(static_cast<size_t>(shard.size()));
    shard.targets.resize(static_cast<size_t>(shard.size()));
    comm_.recv_host({shard.tokens.data(), shard.size(), comm::HostType::i32}, kDriver, kTagTokens);
    comm_.recv_host({shard.targets.data(), shard.size(), comm::HostType::i32}, kDriver,
                    kTagTargets);
    return shard;
  }
  for (int r = 1; r < ranks; ++r) {
    data::RowRange rows = data::shard_rows(global_batch->B, ranks, r);
    data::Batch shard = global_batch->rows(rows.begin, rows.end);
    int32_t shape[2] = {shard.B, shard.T};
    comm_.send_host({shape, 2, comm::HostType::i32}, r, kTagShape);
    comm_.send_host({shard.tokens.data(), shard.size(), comm::HostType::i32}, r, kTagTokens);
    comm_.send_host({shard.targets.data(), shard.size(), comm::HostType::i32}, r, kTagTargets);
  }
  data::RowRange mine = data::shard_rows(global_batch->B, ranks, kDriver);
  return global_batch->rows(mine.begin, mine.end);
}

void DataParallel::broadcast_parameters() {
  // The replicas are rebuilt from the master weights every step, one tensor at a time.
  for (Param* p : model_.params()) comm_.broadcast(p->data, kDriver);
}

float DataParallel::reduce_gradients_to_driver(float my_loss) {
  const int ranks = comm_.size();
  if (comm_.rank() != kDriver) {
    for (Param* p : model_.params()) comm_.send(p->grad, kDriver, kTagGrad);
    comm_.send_host({&my_loss, 1, comm::HostType::f32}, kDriver, kTagLoss);
    return my_loss;
  }
  // Rank 0 receives and adds every replica's gradients, one after the other: a serial bottleneck.
  double loss_sum = my_loss;
  for (int r = 1; r < ranks; ++r) {
    for (Param* p : model_.params()) {
      Tensor incoming = Tensor::empty(p->grad.shape(), MemCategory::comm_buffers);
      comm_.recv(incoming, r, kTagGrad);
      ComputeScope s({.name = "sum gradients", .cat = trace::cat::compute, .peer = r});
      ops::axpy(p->grad, 1.0f, incoming);
    }
    float loss = 0;
    comm_.recv_host({&loss, 1, comm::HostType::f32}, r, kTagLoss);
    loss_sum += loss;
  }
  // Each replica's gradient is the mean over its shard; equal shards make the mean of means the
  // mean over the global batch.
  for (Param* p : model_.params()) {
    ComputeScope s({.name = "average gradients", .cat = trace::cat::compute});
    ops::scale(p->grad, 1.0f / ranks);
  }
  return static_cast<float>(loss_sum / ranks);
}

DataParallelLayout::DataParallelLayout(const GPTConfig& config, comm::Comm& comm,
                                       const train::OptimizerFactory& make_optimizer)
    : comm_(comm),
      model_(config),
      dp_(model_, comm),
      optimizer_(comm.rank() == 0 ? make_optimizer(model_.params()) : nullptr) {}

train::StepOutcome DataParallelLayout::step(const data::Batch& global_batch, int step) {
  const bool driver = comm_.rank() == 0;  // only the driver reads the batch and the loss
  const float loss = dp_.forward_backward(driver ? &global_batch : nullptr, loss_scale());
  // The replicas sit idle through the update: only rank 0 has an optimizer. (fp16: all agree on
  // the found-inf flag, so their loss scales stay equal to the driver's.)
  const bool stepped = optimizer_step(optimizer_.get(), {&comm_}, step);
  if (driver) return {.loss = loss, .skipped = !stepped};
  return {.skipped = !stepped};
}

void DataParallelLayout::report(train::RankReport& report) {
  report.params_held = model_.num_params();
  report.params_updated = optimizer_ ? report.params_held : 0;  // the driver's optimizer only
}

std::vector<train::TensorShard> DataParallelLayout::shards() {
  return train::whole_tensor_shards(model_.params(), optimizer_.get(), comm_.rank() == 0);
}

}  // namespace mgpu::parallel

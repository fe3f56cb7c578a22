// Tensor parallelism, top to bottom (see tensor_parallel.h for the idea):
//   1. sharding: which heads and hidden units each tp rank owns, cut from the seeded full model;
//   2. where the all-reduces go: f before the column-parallel linears, g after the row-parallel
//      ones (the block calls them through its LinearComm, so the block's math is not repeated);
//   3. the part the mesh engine runs (core/parallel/mesh_layout.h): the whole batch on every rank,
//      no gradient synchronisation at all, and which rank's copy each checkpoint tensor takes.
#include "core/parallel/tensor_parallel.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/model/init.h"
#include "core/ops/ops.h"
#include "core/optim/mixed_precision.h"
#include "core/parallel/vocab_parallel.h"
#include "core/runtime/context.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- f and g

void f_forward(Tensor& x, comm::Comm& tp) {
  (void)x;  // every rank already holds the whole input of a column-parallel linear
  (void)tp;
}

void f_backward(Tensor& dx, comm::Comm& tp) {
  // Each rank's column slice contributes its own part of d(input): the sum is the full gradient.
  tp.all_reduce(dx, comm::ReduceOp::sum);
}

void g_forward(Tensor& y, comm::Comm& tp) {
  // Each rank multiplied only its input columns: the partial products sum to x @ W^T.
  tp.all_reduce(y, comm::ReduceOp::sum);
}

void g_backward(Tensor& dy, comm::Comm& tp) {
  (void)dy;  // the output was replicated, so its gradient already is the same on every rank
  (void)tp;
}

// ---------------------------------------------------------------------------------- seams

void check_seams(const TpSeams& seams) {
  const std::pair<const char*, bool> given[] = {{"column_forward", bool(seams.column_forward)},
                                                {"column_backward", bool(seams.column_backward)},
                                                {"row_forward", bool(seams.row_forward)},
                                                {"row_backward", bool(seams.row_backward)}};
  for (const auto& [name, present] : given)
    if (!present)
      throw std::logic_error(fmt::format(
          "tensor-parallel seam '{}' is missing: pass exercise 06's table (reference::seams().tp "
          "or mine::seams().tp)",
          name));
}

// ---------------------------------------------------------------------------------- sharding

bool tp_divides(const GPTConfig& cfg, int tp) {
  return tp >= 1 && cfg.heads % tp == 0 && cfg.kv_head_count() % tp == 0 &&
         cfg.ffn_hidden() % tp == 0;
}

std::string tp_divides_what(const GPTConfig& cfg) {
  const std::string kv = cfg.kv_head_count() != cfg.heads
                             ? fmt::format(", the kv heads ({})", cfg.kv_head_count())
                             : "";
  const std::string width = cfg.style.ffn_dim > 0 ? fmt::format("F ({})", cfg.ffn_hidden())
                                                  : fmt::format("4*dim ({})", cfg.ffn_hidden());
  return fmt::format("the heads ({}){} and the MLP width {}", cfg.heads, kv, width);
}

void check_tp_size(const GPTConfig& cfg, int tp) {
  if (tp_divides(cfg, tp)) return;
  std::string works;
  for (int t = 1; t <= cfg.heads; ++t)
    if (tp_divides(cfg, t)) works += (works.empty() ? "" : ", ") + std::to_string(t);
  const bool gqa = cfg.kv_head_count() != cfg.heads;
  throw std::invalid_argument(
      fmt::format("tensor parallelism over {} ranks needs {} to divide {}: use {} ranks (or "
                  "change --heads{})",
                  tp, tp, tp_divides_what(cfg), works, gqa ? " or --kv-heads" : ""));
}

TpSlice tp_slice(const GPTConfig& cfg, int tp, int rank) {
  check_tp_size(cfg, tp);
  const int heads = cfg.heads / tp, kv = cfg.kv_head_count() / tp;
  const int hidden = static_cast<int>(cfg.ffn_hidden() / tp);
  return {.head_begin = rank * heads,
          .head_end = (rank + 1) * heads,
          .hidden_begin = rank * hidden,
          .hidden_end = (rank + 1) * hidden,
          .kv_begin = rank * kv,
          .kv_end = (rank + 1) * kv};
}

void split_block(Block& block, const GPTConfig& cfg, const TpSlice& slice) {
  const int64_t c = cfg.dim, hs = cfg.head_size(), kv = cfg.kv_dim(), w = cfg.qkv_width();
  const int64_t f = cfg.ffn_hidden(), fc = cfg.fc_width(f);
  const int64_t h0 = slice.head_begin * hs, h1 = slice.head_end * hs;
  const int64_t k0 = slice.kv_begin * hs, k1 = slice.kv_end * hs;
  const int64_t u0 = slice.hidden_begin, u1 = slice.hidden_end;
  // Column-parallel: my query heads' rows of q, my kv heads' rows of k and of v (the kv heads my
  // query heads read: the groups stay whole), and my hidden units' rows of fc (of gate and of up
  // under SwiGLU: silu(gate_j) * up_j pairs unit j's two rows on one rank).
  const std::vector<std::pair<int64_t, int64_t>> my_qkv = {
      {h0, h1}, {c + k0, c + k1}, {c + kv + k0, c + kv + k1}};
  std::vector<std::pair<int64_t, int64_t>> my_fc = {{u0, u1}};
  if (cfg.swiglu()) my_fc.emplace_back(f + u0, f + u1);
  block.qkv.weight.spec = PartitionSpec::rows({w, c}, my_qkv);
  block.qkv.bias.spec = PartitionSpec::rows({w}, my_qkv);
  block.fc.weight.spec = PartitionSpec::rows({fc, c}, my_fc);
  block.fc.bias.spec = PartitionSpec::rows({fc}, my_fc);
  // Row-parallel: my input columns of every row; the bias stays whole (added once).
  block.attn_proj.weight.spec = PartitionSpec::columns({c, c}, h0, h1);
  block.mlp_proj.weight.spec = PartitionSpec::columns({c, f}, u0, u1);
}

std::vector<train::TensorShard> tp_shards(const ParamList& params, optim::Optimizer& optimizer,
                                          bool writes_split, bool writes_replicated) {
  return train::partitioned_shards(params, &optimizer, [&](const Param& p) {
    return p.spec.split() ? writes_split : writes_replicated;
  });
}

TensorParallelPart::TensorParallelPart(const GPTConfig& cfg, comm::Comm& tp, const TpSeams& seams,
                                       bool vocab_parallel_head)
    : TensorParallelPart(cfg, tp, std::make_unique<TensorParallelComm>(tp, seams), 1,
                         vocab_parallel_head) {}

TensorParallelPart::TensorParallelPart(const GPTConfig& cfg, comm::Comm& tp,
                                       std::unique_ptr<LinearComm> linears, int seq_parts,
                                       bool vocab_parallel_head)
    : config_(cfg),
      tp_(tp),
      linears_(std::move(linears)),
      seq_parts_(seq_parts),
      vocab_parallel_head_(vocab_parallel_head),
      slice_(tp_slice(cfg, tp.size(), tp.rank())) {}

void TensorParallelPart::shard_blocks(BlockShard& shard) const {
  shard.heads = slice_.block().heads;
  shard.hidden = slice_.block().hidden;
  shard.kv_heads = slice_.block().kv_heads;
  shard.seq_parts = seq_parts_;
}

void TensorParallelPart::split(GPT& model) {
  for (Block& block : model.blocks) split_block(block, config_, slice_);
  if (vocab_parallel_head_) split_head(model.head, config_, tp_.size(), tp_.rank());
}

void TensorParallelPart::attach(GPT& model, TracePhase& phase) {
  if (tp_.size() > 1) model.set_block_comm({.linear = linears_.get(), .phase = &phase});
  if (vocab_parallel_head_) {
    head_comm_ = std::make_unique<VocabParallelHead>(tp_, config_.vocab, PartialSums::fp32, &phase);
    model.head.comm = head_comm_.get();
  }
}

bool TensorParallelPart::writes(const Param& p) const {
  // A split tensor: every rank writes its own slice; a replicated one: tp rank 0's copy.
  return p.spec.split() || tp_.rank() == 0;
}

std::unique_ptr<MeshLayout> tensor_parallel(const GPTConfig& cfg, comm::Comm& tp,
                                            const train::OptimizerFactory& make_optimizer,
                                            const TpSeams& seams, bool vocab_parallel_head,
                                            std::shared_ptr<Mesh> mesh) {
  return std::make_unique<MeshLayout>(
      cfg, std::make_unique<TensorParallelPart>(cfg, tp, seams, vocab_parallel_head),
      make_optimizer, std::move(mesh));
}

// ---------------------------------------------------------------------------------- the
// all-reduces

// Mixed precision: the two all-reduces that sum partial results (g forward after a row-parallel
// linear, f backward after a column-parallel one) sum them in fp32 and round once into the
// 2-byte activation, as the single-device linear rounds its one fp32 result. Summing 2-byte
// partials instead would round every partial first (bf16 keeps 8 bits), so TP would no longer
// compute the single-device model's numbers. The price: 4 B per element on the wire, not 2.
Tensor fp32_partial(const Tensor& like) {
  return Tensor::empty(like.shape(), MemCategory::comm_buffers, DType::f32);
}

// TP's f and g: every rank holds the whole input (gather is the identity); partial results are
// summed by an all-reduce, in fp32 for 2-byte activations.
Tensor TensorParallelCollectives::gather(const Tensor& mine) {
  return mine;
}

Tensor TensorParallelCollectives::partial_buffer(const Tensor& mine) {
  return sums_in_fp32(mine) ? fp32_partial(mine) : mine;
}

void TensorParallelCollectives::sum(Tensor& mine, Tensor& partial) {
  tp_.all_reduce(partial, comm::ReduceOp::sum);
  if (!partial.shares_storage(mine)) ops::convert(mine, partial);  // rounded once
}

TensorParallelComm::TensorParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums)
    : TensorParallelComm(std::move(seams), std::make_unique<TensorParallelCollectives>(tp, sums)) {}

TensorParallelComm::TensorParallelComm(TpSeams seams,
                                       std::unique_ptr<LinearCollectives> collectives)
    : seams_(std::move(seams)), collectives_(std::move(collectives)) {
  check_seams(seams_);
}

void TensorParallelComm::column_forward(const Linear& linear, Tensor& out, const Tensor& inp) {
  seams_.column_forward(out, inp, linear.weight.data, linear.bias.data, *collectives_);
}

void TensorParallelComm::column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                                         const Tensor& inp) {
  seams_.column_backward(dinp, linear.weight.grad, linear.bias.grad, dout, inp, linear.weight.data,
                         *collectives_);
}

void TensorParallelComm::row_forward(const Linear& linear, Tensor& out, const Tensor& inp) {
  const Tensor no_bias;
  if (!collectives_->sums_in_fp32(out)) {
    // The bias is added once, by tp rank 0, so the summed output holds it once.
    const bool adds_bias = collectives_->group().rank() == 0;
    seams_.row_forward(out, inp, linear.weight.data, adds_bias ? linear.bias.data : no_bias,
                       *collectives_);
    return;
  }
  // 2-byte activations: the fp32 sum of the partial products (the seam's output is fp32),
  // rounded, then the bias on every rank (as the single-device linear adds it to its rounded
  // product).
  Tensor sum = fp32_partial(out);
  seams_.row_forward(sum, inp, linear.weight.data, no_bias, *collectives_);
  ops::convert(out, sum);
  if (linear.bias.data.defined()) ops::bias_add(out, linear.bias.data);
}

void TensorParallelComm::row_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                                      const Tensor& inp) {
  seams_.row_backward(dinp, linear.weight.grad, linear.bias.grad, dout, inp, linear.weight.data,
                      *collectives_);
}

void TensorParallelComm::column_backward_input(const Linear& linear, Tensor& dinp,
                                               const Tensor& dout) {
  // My columns' share of dout @ W, summed over the tp group (f's backward), in fp32 under mixed
  // precision as column_backward sums it.
  Tensor dx = collectives_->partial_buffer(dinp);
  ops::matmul(dx, dout, linear.weight.data);
  collectives_->sum(dinp, dx);
}

}  // namespace mgpu::parallel

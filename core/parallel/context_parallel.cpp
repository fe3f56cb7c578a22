// Context parallelism, top to bottom (see context_parallel.h for the idea):
//   1. which tokens each rank holds (contiguous, zigzag, ulysses, chunked) and the size checks;
//   2. attention, where the ranks meet: ring attention (its K/V ring is in ring_attention.cpp) or
//   3. Ulysses: all-to-all to whole sequences of a few heads, plain attention, all-to-all back;
//   4. one step: my columns of the batch, forward, backward, gradients averaged over cp.
#include "core/parallel/context_parallel.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/ops/ops.h"

namespace mgpu::parallel {

// ---------------------------------------------------------------------------------- layouts

const char* cp_layout_name(CpLayout layout) {
  switch (layout) {
    case CpLayout::contiguous:
      return "contiguous";
    case CpLayout::zigzag:
      return "zigzag";
    case CpLayout::ulysses:
      return "ulysses";
    case CpLayout::chunked:
      return "chunked";
  }
  return "?";
}

CpLayout parse_cp_layout(const std::string& text) {
  for (CpLayout l : {CpLayout::contiguous, CpLayout::zigzag, CpLayout::ulysses, CpLayout::chunked})
    if (text == cp_layout_name(l)) return l;
  throw std::invalid_argument("unknown --cp-layout '" + text +
                              "' (use contiguous, zigzag, ulysses or chunked)");
}

void check_cp_size(const GPTConfig& cfg, int seq, int cp, CpLayout layout) {
  if (cp < 1) throw std::invalid_argument(fmt::format("--cp must be at least 1, got {}", cp));
  const int chunks = layout == CpLayout::zigzag ? 2 * cp : cp;
  if (seq % chunks != 0)
    throw std::invalid_argument(
        fmt::format("--seq {} does not split into {} equal chunks ({}{} ranks): use --seq {} or {}",
                    seq, chunks, layout == CpLayout::zigzag ? "zigzag: 2 per rank, " : "", cp,
                    std::max(chunks, seq / chunks * chunks), (seq / chunks + 1) * chunks));
  if (layout == CpLayout::ulysses && cfg.heads % cp != 0)
    throw std::invalid_argument(fmt::format(
        "ulysses splits the heads over the ranks: {} heads do not divide over {} ranks; use "
        "--heads {} (or another --cp-layout)",
        cfg.heads, cp, (cfg.heads / cp + 1) * cp));
}

std::vector<int32_t> cp_positions(int seq, int cp, int rank, CpLayout layout) {
  std::vector<int32_t> positions;
  auto chunk = [&](int index, int size) {
    for (int i = 0; i < size; ++i) positions.push_back(index * size + i);
  };
  if (layout == CpLayout::zigzag) {  // an early chunk and its mirror: equal causal work
    chunk(rank, seq / (2 * cp));
    chunk(2 * cp - 1 - rank, seq / (2 * cp));
  } else {
    chunk(rank, seq / cp);
  }
  return positions;
}

data::Batch batch_columns(const data::Batch& batch, const std::vector<int32_t>& positions) {
  data::Batch mine{.B = batch.B, .T = static_cast<int>(positions.size())};
  for (int row = 0; row < batch.B; ++row)
    for (int32_t pos : positions) {
      mine.tokens.push_back(batch.tokens[size_t(row) * size_t(batch.T) + size_t(pos)]);
      mine.targets.push_back(batch.targets[size_t(row) * size_t(batch.T) + size_t(pos)]);
    }
  return mine;
}

// ---------------------------------------------------------------------------------- set-up

ContextParallel::ContextParallel(const GPTConfig& cfg, comm::Comm& cp, CpLayout layout, int seq,
                                 const train::OptimizerFactory& make_optimizer,
                                 const CpSeams& seams)
    : config_(cfg), cp_(cp), layout_(layout), seq_(seq), ring_(cp, layout, seq, seams) {
  check_cp_size(cfg, seq, cp.size(), layout);
  // Every rank holds the whole seeded model. Ring attention and Ulysses keep the rank's rows of
  // the whole sequence's score matrix ([T/cp, T] per head, or [T, T] for H/cp heads: the same
  // size); chunked keeps only its own chunk's [T/cp, T/cp].
  shard_ = BlockShard::whole(cfg);
  if (layout != CpLayout::chunked && cp.size() > 1) shard_.attention_keys = seq;
  model_ = std::make_unique<GPT>(cfg);
  model_->embedding.positions = positions();
  for (Block& block : model_->blocks) block.shard = shard_;
  if (layout != CpLayout::chunked && cp.size() > 1) model_->set_block_hooks(this);
  optimizer_ = make_optimizer(model_->params());
}

// ---------------------------------------------------------------------------------- attention

namespace {
Tensor scratch(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::zeros(shape, MemCategory::workspace, dtype);
}
}  // namespace

void ContextParallel::attention_forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
                                        int heads) {
  const bool open = phase_.has_value();
  phase_.reset();  // the ring's compute records its own scopes, its waits none
  ring_.category = phase_proto_.cat;
  if (layout_ == CpLayout::ulysses)
    ulysses_forward(out, att, qkv, heads);
  else
    ring_.attention_forward(out, att, lse, qkv, heads);
  if (open) phase_.emplace(phase_proto_);
}

void ContextParallel::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                         const Tensor& out, const Tensor& att, const Tensor& lse,
                                         int heads) {
  const bool open = phase_.has_value();
  phase_.reset();
  ring_.category = phase_proto_.cat;
  if (layout_ == CpLayout::ulysses)
    ulysses_backward(dqkv, dout, qkv, att, heads);
  else
    ring_.attention_backward(dqkv, dout, qkv, out, att, lse, heads);
  if (open) phase_.emplace(phase_proto_);
}

// ---------------------------------------------------------------------------------- Ulysses

// [B, T/cp, parts*C] by sequence -> [B, T, parts*C/cp] by heads: block d of the all-to-all's input
// holds my tokens' channels of rank d's heads; block s of its output, rank s's tokens of mine.
Tensor ContextParallel::to_heads(const Tensor& by_sequence, int parts) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1);
  const int64_t c = by_sequence.dim(2) / parts, cd = c / cp, block = b * t * parts * cd;
  Tensor send = scratch({cp * block}, by_sequence.dtype());
  Tensor recv = scratch({cp * block}, by_sequence.dtype());
  Tensor by_heads = scratch({b, t * cp, parts * cd}, by_sequence.dtype());
  {
    ComputeScope s({.name = "ulysses: pack heads", .cat = phase_proto_.cat});
    const Tensor rows = by_sequence.reshape({b * t, parts * c});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b * t, parts * cd});
      for (int p = 0; p < parts; ++p) ops::copy_columns(to_d, p * cd, rows, p * c + d * cd, cd);
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack sequence", .cat = phase_proto_.cat});
  Tensor whole = by_heads.reshape({b, t * cp * parts * cd});
  for (int src = 0; src < cp; ++src) {
    const Tensor from = recv.flat_range(src * block, (src + 1) * block).reshape({b, block / b});
    ops::copy_columns(whole, src * (block / b), from, 0, block / b);
  }
  return by_heads;
}

// The inverse: [B, T, parts*C/cp] by heads -> [B, T/cp, parts*C] by sequence.
void ContextParallel::to_sequence(Tensor& by_sequence, const Tensor& by_heads, int parts) {
  const int cp = cp_.size();
  const int64_t b = by_sequence.dim(0), t = by_sequence.dim(1);
  const int64_t c = by_sequence.dim(2) / parts, cd = c / cp, block = b * t * parts * cd;
  Tensor send = scratch({cp * block}, by_heads.dtype());
  Tensor recv = scratch({cp * block}, by_heads.dtype());
  {
    ComputeScope s({.name = "ulysses: pack sequence", .cat = phase_proto_.cat});
    const Tensor whole = by_heads.reshape({b, t * cp * parts * cd});
    for (int d = 0; d < cp; ++d) {
      Tensor to_d = send.flat_range(d * block, (d + 1) * block).reshape({b, block / b});
      ops::copy_columns(to_d, 0, whole, d * (block / b), block / b);
    }
  }
  cp_.all_to_all(send, recv);
  ComputeScope s({.name = "ulysses: unpack heads", .cat = phase_proto_.cat});
  Tensor rows = by_sequence.reshape({b * t, parts * c});
  for (int src = 0; src < cp; ++src) {
    const Tensor from =
        recv.flat_range(src * block, (src + 1) * block).reshape({b * t, parts * cd});
    for (int p = 0; p < parts; ++p) ops::copy_columns(rows, p * c + src * cd, from, p * cd, cd);
  }
}

void ContextParallel::ulysses_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads) {
  const int cp = cp_.size();
  const Tensor qkv_heads = to_heads(qkv, 3);  // whole sequences, heads/cp heads
  Tensor out_heads =
      scratch({qkv_heads.dim(0), qkv_heads.dim(1), qkv_heads.dim(2) / 3}, qkv.dtype());
  Tensor att_heads =
      att.reshape({qkv.dim(0), heads / cp, seq_, seq_});  // same size as [B,H,T/cp,T]
  {
    ComputeScope s({.name = "ulysses attention", .cat = phase_proto_.cat});
    ops::attention_forward(out_heads, att_heads, qkv_heads, heads / cp);
  }
  to_sequence(out, out_heads, 1);
}

// Backward re-shards qkv rather than keeping the head-sharded copy (one more all-to-all instead
// of another [B, T, 3C/cp] activation per layer).
void ContextParallel::ulysses_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& att, int heads) {
  const int cp = cp_.size();
  const Tensor qkv_heads = to_heads(qkv, 3);
  const Tensor dout_heads = to_heads(dout, 1);
  Tensor dqkv_heads = scratch(qkv_heads.shape(), qkv.dtype());
  const Tensor att_heads = att.reshape({qkv.dim(0), heads / cp, seq_, seq_});
  {
    ComputeScope s({.name = "ulysses attention", .cat = phase_proto_.cat});
    ops::attention_backward(dqkv_heads, dout_heads, qkv_heads, att_heads, heads / cp);
  }
  to_sequence(dqkv, dqkv_heads, 3);
}

// ---------------------------------------------------------------------------------- one step

train::StepOutcome ContextParallel::step(const data::Batch& batch, int step) {
  if (batch.T != seq_)
    throw std::invalid_argument(fmt::format(
        "context parallelism was set up for sequences of {} tokens, got {}", seq_, batch.T));
  // My columns of every sequence (inputs and targets alike): B x T/cp tokens.
  const data::Batch mine = batch_columns(batch, positions());
  const int t = mine.T;
  const std::vector<int32_t>&tokens = mine.tokens, &targets = mine.targets;
  optimizer_->zero_grad();
  GPTActivations acts = GPTActivations::allocate(config_, shard_, batch.B, t);
  phase_proto_ = {.name = "forward", .cat = trace::cat::forward};
  phase_.emplace(phase_proto_);
  // My tokens' mean loss; the ranks' shares are equal, so their mean is the batch's mean.
  const float loss = model_->forward(tokens, targets, acts, loss_scale());
  phase_proto_ = {.name = "backward", .cat = trace::cat::backward};
  phase_.emplace(phase_proto_);
  model_->backward(tokens, acts);
  phase_.reset();
  // Each rank's gradient is d(its tokens' mean)/dW: their average is d(batch mean)/dW.
  // (Blocking, one tensor at a time: the sum then runs in the same order on threads and under
  // mpirun, so both give the same bits.)
  if (cp_.size() > 1)
    for (Param* p : model_->params()) cp_.all_reduce(p->grad, comm::ReduceOp::avg);
  // fp16: the gradients are averaged over cp, so every rank sees the same overflow; the flag is
  // still agreed over cp, so a rank's own (injected) overflow skips the step everywhere.
  const bool stepped = optimizer_step(optimizer_.get(), {&cp_}, step);
  return {.shard_loss = loss, .skipped = !stepped};
}

std::vector<train::TensorShard> ContextParallel::shards() {
  // Every rank holds every weight: the checkpoint takes rank 0's copy.
  return train::whole_tensor_shards(model_->params(), optimizer_.get(), cp_.rank() == 0);
}

}  // namespace mgpu::parallel

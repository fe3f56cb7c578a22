// Sequence parallelism, top to bottom (see sequence_parallel.h for the idea):
//   1. moving a [B,T,C] tensor between "my T/t tokens" and "the whole sequence";
//   2. f-bar and g-bar at the block's four communication points (the block calls them through
//      its LinearComm; TensorParallel supplies the slices, the checkpoint map and the optimizer);
//   3. one step: the embedding's output cut to my tokens before block 0, the last block's output
//      gathered before the (replicated) head, the layernorm gradients summed over the tp group.
#include "core/parallel/sequence_parallel.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/ops/ops.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

void check_sp_size(const GPTConfig& cfg, int tp, int seq) {
  check_tp_size(cfg, tp);
  if (seq > 0 && seq % tp == 0) return;
  const int down = seq / tp * tp, up = (seq / tp + 1) * tp;
  throw std::invalid_argument(fmt::format(
      "sequence parallelism over {} ranks cuts the sequence into {} equal parts, but --seq {} is "
      "not a multiple of {}: use --seq {}{}",
      tp, tp, seq, tp, down > 0 ? fmt::format("{} or ", down) : "", up));
}

// ---------------------------------------------------------------------------------- my tokens

namespace {
// Calls copy(full_offset, rank_major_offset, length) for every run of T/t tokens: rank r's tokens
// of sequence b sit at (b*T + r*T/t)*C in the full [B,T,C] tensor and at ((r*B + b)*T/t)*C in
// the rank-major [t][B,T/t,C] layout the collectives gather and scatter in.
template <class Copy>
void for_each_token_run(const Tensor& full, int parts, int only_rank, Copy&& copy) {
  const int64_t batch = full.dim(0), seq = full.dim(1), c = full.dim(2);
  const int64_t mine = seq / parts;
  for (int r = 0; r < parts; ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    for (int64_t b = 0; b < batch; ++b)
      copy((b * seq + r * mine) * c, (int64_t{r} * batch + b) * mine * c, mine * c);
  }
}

// A [B,T,C] buffer for a rank's [B,T/parts,C].
Tensor whole_sequence(const Tensor& mine, int parts) {
  return Tensor::empty({mine.dim(0), mine.dim(1) * parts, mine.dim(2)}, MemCategory::workspace,
                       mine.dtype());
}

Tensor rank_major_buffer(const Tensor& full) {
  return Tensor::empty({full.numel()}, MemCategory::comm_buffers, full.dtype());
}
}  // namespace

void all_gather_sequence(Tensor& full, const Tensor& mine, comm::Comm& tp) {
  if (tp.size() == 1) return full.copy_from(mine);
  Tensor stacked = rank_major_buffer(full);
  tp.all_gather(mine, stacked);
  for_each_token_run(full, tp.size(), -1, [&](int64_t at, int64_t from, int64_t n) {
    full.flat_range(at, at + n).copy_from(stacked.flat_range(from, from + n));
  });
}

void reduce_scatter_sequence(Tensor& mine, const Tensor& full, comm::Comm& tp) {
  if (tp.size() == 1) return mine.copy_from(full);
  Tensor stacked = rank_major_buffer(full);
  for_each_token_run(full, tp.size(), -1, [&](int64_t at, int64_t to, int64_t n) {
    stacked.flat_range(to, to + n).copy_from(full.flat_range(at, at + n));
  });
  tp.reduce_scatter(stacked, mine, comm::ReduceOp::sum);
}

void keep_my_tokens(Tensor& mine, const Tensor& full, int rank, int parts) {
  const int64_t base = int64_t{rank} * mine.numel();  // my chunk's start in the rank-major layout
  for_each_token_run(full, parts, rank, [&](int64_t at, int64_t to, int64_t n) {
    mine.flat_range(to - base, to - base + n).copy_from(full.flat_range(at, at + n));
  });
}

// ---------------------------------------------------------------------------------- f-bar, g-bar

SequenceParallel::SequenceParallel(const GPTConfig& cfg, comm::Comm& tp,
                                   const train::OptimizerFactory& make_optimizer,
                                   const TpSeams& seams)
    : TensorParallel(cfg, tp, make_optimizer, std::make_unique<SequenceParallelComm>(tp, seams),
                     tp.size()) {}

SequenceParallelComm::SequenceParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums)
    : tp_(tp), seams_(std::move(seams)), sums_(sums) {
  check_seams(seams_);
}

Tensor SequenceParallelComm::full_sequence(const Tensor& mine) const {
  return whole_sequence(mine, tp_.size());
}

bool SequenceParallelComm::sum_in_fp32(const Tensor& t) const {
  return t.dtype() != DType::f32 && sums_ == PartialSums::fp32;
}

void SequenceParallelComm::column_forward(const Linear& linear, Tensor& out, const Tensor& inp) {
  // f-bar forward: all-gather my tokens of ln(x) into the whole sequence the column linear needs.
  Tensor x = full_sequence(inp);
  all_gather_sequence(x, inp, tp_);
  // Every rank now holds the whole input, as TP's column linear expects (its f is the identity).
  seams_.column_forward(out, x, linear.weight.data, linear.bias.data, tp_);
}

void SequenceParallelComm::column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                                           const Tensor& inp) {
  // The gathered input was dropped after the forward (keeping it would undo what SP saves), so
  // it is gathered again for the weight gradient: Korthikanti et al.'s extra all-gather, which
  // Megatron overlaps with the input-gradient GEMM.
  Tensor x = full_sequence(inp);
  all_gather_sequence(x, inp, tp_);
  // f-bar backward: every rank's columns contribute to d(input); sum them and keep my tokens.
  // (2-byte activations: summed in fp32 and rounded once, as in TensorParallelComm.)
  const bool fp32 = sum_in_fp32(dinp);
  Tensor dx = fp32 ? TensorParallel::fp32_partial(x) : full_sequence(inp);
  linear.backward(dx, dout, x);
  Tensor mine = fp32 ? TensorParallel::fp32_partial(dinp) : dinp;
  reduce_scatter_sequence(mine, dx, tp_);
  if (fp32) ops::convert(dinp, mine);
}

void SequenceParallelComm::row_forward(const Linear& linear, Tensor& out, const Tensor& inp) {
  // g-bar forward: each rank's partial product over the whole sequence, summed and cut to my
  // tokens in one reduce-scatter. The bias is added by tp rank 0 only, so the sum holds it once.
  // (2-byte activations: the partial products are summed in fp32 and rounded once, then the
  // bias is added on every rank, as the single-device linear does.)
  const bool fp32 = sum_in_fp32(out);
  Tensor partial = fp32 ? TensorParallel::fp32_partial(full_sequence(out)) : full_sequence(out);
  const Tensor no_bias;
  ops::linear_forward(partial, inp, linear.weight.data,
                      !fp32 && tp_.rank() == 0 ? linear.bias.data : no_bias);
  Tensor sum = fp32 ? TensorParallel::fp32_partial(out) : out;
  reduce_scatter_sequence(sum, partial, tp_);
  if (fp32) ops::convert(out, sum);
  if (fp32 && linear.bias.data.defined()) ops::bias_add(out, linear.bias.data);
}

void SequenceParallelComm::row_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                                        const Tensor& inp) {
  // g-bar backward: all-gather the output's gradient over the sequence; the bias gradient then
  // sums every token on every rank, so it is complete (and equal) everywhere.
  Tensor dy = full_sequence(dout);
  all_gather_sequence(dy, dout, tp_);
  // The whole output's gradient on every rank, as TP's row linear expects (its g backward is
  // the identity).
  seams_.row_backward(dinp, linear.weight.grad, linear.bias.grad, dy, inp, linear.weight.data, tp_);
}

void SequenceParallelComm::column_backward_input(const Linear&, Tensor&, const Tensor&) {
  // Zero-bubble's B would also need g-bar's all-gather before the row linears' input gradients,
  // and W the gathered dy: no schedule runs sequence-parallel blocks split (hybrid's are TP's).
  throw std::logic_error(
      "sequence parallelism has no split backward (zero-bubble B/W): run its blocks' whole "
      "backward, or tensor parallelism under a zero-bubble schedule");
}

Tensor SequenceParallel::full_sequence(const Tensor& mine) const {
  return whole_sequence(mine, tp_.size());
}

void SequenceParallel::all_reduce_layernorm_grads() {
  if (tp_.size() == 1) return;
  std::vector<Param*> norms;
  for (Block& block : model_->blocks)
    for (LayerNorm* ln : {&block.ln1, &block.ln2})
      norms.insert(norms.end(), {&ln->weight, &ln->bias});
  // One all-reduce for all of them (Megatron coalesces them too): 4*C per layer, not activations.
  int64_t total = 0;
  for (Param* p : norms) total += p->grad.numel();
  Tensor packed = Tensor::empty({total}, MemCategory::comm_buffers, DType::f32);
  int64_t at = 0;
  for (Param* p : norms) {
    packed.flat_range(at, at + p->grad.numel()).copy_from(p->grad);
    at += p->grad.numel();
  }
  tp_.all_reduce(packed, comm::ReduceOp::sum);
  at = 0;
  for (Param* p : norms) {
    p->grad.copy_from(packed.flat_range(at, at + p->grad.numel()));
    at += p->grad.numel();
  }
}

// ---------------------------------------------------------------------------------- one step

train::StepOutcome SequenceParallel::step(const data::Batch& batch, int step) {
  check_sp_size(config_, tp_.size(), static_cast<int>(batch.T));
  const int tp = tp_.size();
  GPT& model = *model_;
  const DType dt = config_.dtype;
  optimizer_->zero_grad();
  // acts.embedded and every block's layernorm/residual tensors hold my T/t tokens.
  GPTActivations acts = GPTActivations::allocate(config_, block_shard(), batch.B, batch.T);
  // The head stays replicated (as in TP): it reads the whole sequence, kept for its backward.
  Tensor head_input = Tensor::empty({batch.B, batch.T, config_.dim}, MemCategory::activations, dt);

  phase_.open("forward", trace::cat::forward);
  {
    // Every rank embeds the whole batch (the embedding is replicated), then enters the sequence-
    // parallel region with its own tokens: a cut, no communication (Megatron's "scatter").
    Tensor embedded = full_sequence(acts.embedded);
    model.embedding.forward(embedded, batch.tokens);
    keep_my_tokens(acts.embedded, embedded, tp_.rank(), tp);
  }
  const Tensor* x = &acts.embedded;
  for (size_t i = 0; i < model.blocks.size(); ++i) {
    model.blocks[i].forward(*x, acts.blocks[i]);
    x = &acts.blocks[i].out;
  }
  // Leaving the region: the last block's output all-gathered for the head.
  phase_.paused([&] { all_gather_sequence(head_input, *x, tp_); });
  const float loss = model.head.forward_loss(head_input, batch.targets, acts.head, loss_scale());

  phase_.open("backward", trace::cat::backward);
  Tensor d_full = full_sequence(acts.embedded);
  model.head.backward(d_full, acts.head);
  // The head ran on every rank alike, so each already holds the whole gradient of its input: the
  // backward of the gather is a cut (a reduce-scatter would count it t times).
  Tensor dx = Tensor::empty(acts.embedded.shape(), MemCategory::workspace, dt);
  keep_my_tokens(dx, d_full, tp_.rank(), tp);
  for (size_t i = model.blocks.size(); i-- > 0;) model.blocks[i].backward(dx, dx, acts.blocks[i]);
  // The backward of the cut after the embedding: gather the whole sequence's gradient, so the
  // replicated embedding gets the same (complete) gradient on every rank.
  phase_.paused([&] { all_gather_sequence(d_full, dx, tp_); });
  model.embedding.backward(d_full, batch.tokens);
  phase_.close();
  all_reduce_layernorm_grads();
  // fp16: a sharded weight's overflow is only on its owner: the found-inf flag is agreed over tp.
  const bool stepped = optimizer_step(optimizer_.get(), {&tp_}, step);
  return {.loss = loss, .skipped = !stepped};
}

}  // namespace mgpu::parallel

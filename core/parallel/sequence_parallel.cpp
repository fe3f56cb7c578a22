// Sequence parallelism, top to bottom (see sequence_parallel.h for the idea):
//   1. moving a [B,T,C] tensor between "my T/t tokens" and "the whole sequence";
//   2. f-bar and g-bar: TP's four linears (exercise 06's functions, through TensorParallelComm)
//      given SP's collectives, an all-gather and a reduce-scatter along the sequence
//      (TensorParallel supplies the slices, the checkpoint map and the optimizer);
//   3. one step: the embedding's output cut to my tokens before block 0, the last block's output
//      gathered before the (replicated) head, the layernorm gradients summed over the tp group.
#include "core/parallel/sequence_parallel.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/ops/ops.h"
#include "core/runtime/context.h"

namespace mgpu::parallel {

void check_sp_size(const GPTConfig& cfg, int tp, int seq) {
  check_tp_size(cfg, tp);
  refuse_experts(
      cfg, "sequence parallelism",
      "its ranks each hold part of every sequence; drop --experts or use tensor_parallel");
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

SequenceParallelPart::SequenceParallelPart(const GPTConfig& cfg, comm::Comm& tp,
                                           const TpSeams& seams)
    : TensorParallelPart(cfg, tp, std::make_unique<SequenceParallelComm>(tp, seams), tp.size(),
                         false) {}

std::unique_ptr<MeshLayout> sequence_parallel(const GPTConfig& cfg, comm::Comm& tp,
                                              const train::OptimizerFactory& make_optimizer,
                                              const TpSeams& seams, std::shared_ptr<Mesh> mesh) {
  return std::make_unique<MeshLayout>(cfg, std::make_unique<SequenceParallelPart>(cfg, tp, seams),
                                      make_optimizer, std::move(mesh));
}

SequenceParallelComm::SequenceParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums)
    : TensorParallelComm(std::move(seams),
                         std::make_unique<SequenceParallelCollectives>(tp, sums)) {}

Tensor SequenceParallelCollectives::gather(const Tensor& mine) {
  // f-bar forward (before a column linear), g-bar backward (after a row linear).
  Tensor whole = whole_sequence(mine, tp_.size());
  all_gather_sequence(whole, mine, tp_);
  return whole;
}

Tensor SequenceParallelCollectives::partial_buffer(const Tensor& mine) {
  if (!sums_in_fp32(mine)) return whole_sequence(mine, tp_.size());
  return Tensor::empty({mine.dim(0), mine.dim(1) * tp_.size(), mine.dim(2)},
                       MemCategory::comm_buffers, DType::f32);
}

void SequenceParallelCollectives::sum(Tensor& mine, Tensor& partial) {
  // f-bar backward, g-bar forward: the whole sequence's partial results, summed and cut to my
  // tokens in one reduce-scatter (2-byte activations summed in fp32 are rounded once).
  const bool fp32 = partial.dtype() != mine.dtype();
  Tensor sum = fp32 ? fp32_partial(mine) : mine;
  reduce_scatter_sequence(sum, partial, tp_);
  if (fp32) ops::convert(mine, sum);
}

void SequenceParallelComm::column_backward_input(const Linear&, Tensor&, const Tensor&) {
  // Zero-bubble's B would also need g-bar's all-gather before the row linears' input gradients,
  // and W the gathered dy: no schedule runs sequence-parallel blocks split (hybrid's are TP's).
  throw std::logic_error(
      "sequence parallelism has no split backward (zero-bubble B/W): run its blocks' whole "
      "backward, or tensor parallelism under a zero-bubble schedule");
}

Tensor SequenceParallelPart::full_sequence(const Tensor& mine) const {
  return whole_sequence(mine, tp_.size());
}

void all_reduce_layernorm_grads(const std::vector<Block*>& blocks, comm::Comm& tp) {
  if (tp.size() == 1) return;
  std::vector<Param*> norms;
  for (Block* block : blocks)
    for (LayerNorm* ln : {&block->ln1, &block->ln2})
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
  tp.all_reduce(packed, comm::ReduceOp::sum);
  at = 0;
  for (Param* p : norms) {
    p->grad.copy_from(packed.flat_range(at, at + p->grad.numel()));
    at += p->grad.numel();
  }
}

// ---------------------------------------------------------------------------------- one step

data::Batch SequenceParallelPart::share(const data::Batch& batch) {
  check_sp_size(config_, tp_.size(), static_cast<int>(batch.T));
  return batch;  // every rank embeds the whole batch; the blocks keep its T/t tokens
}

std::optional<float> SequenceParallelPart::forward_backward(GPT& model, const data::Batch& batch,
                                                            TracePhase& phase, float loss_scale) {
  const int tp = tp_.size();
  // acts.embedded and every block's layernorm/residual tensors hold my T/t tokens.
  GPTActivations acts = GPTActivations::allocate(config_, model.shard(), batch.B, batch.T);
  // The head stays replicated (as in TP): it reads the whole sequence, kept for its backward.
  Tensor head_input =
      Tensor::empty({batch.B, batch.T, config_.dim}, MemCategory::activations, config_.dtype);

  phase.open("forward", trace::cat::forward);
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
  phase.paused([&] { all_gather_sequence(head_input, *x, tp_); });
  const float loss = model.head.forward_loss(head_input, batch.targets, acts.head, loss_scale);

  phase.open("backward", trace::cat::backward);
  Tensor d_full = full_sequence(acts.embedded);
  model.head.backward(d_full, acts.head);
  // The head ran on every rank alike, so each already holds the whole gradient of its input: the
  // backward of the gather is a cut (a reduce-scatter would count it t times).
  Tensor dx = Tensor::empty(acts.embedded.shape(), MemCategory::workspace, config_.dtype);
  keep_my_tokens(dx, d_full, tp_.rank(), tp);
  for (size_t i = model.blocks.size(); i-- > 0;) model.blocks[i].backward(dx, dx, acts.blocks[i]);
  // The backward of the cut after the embedding: gather the whole sequence's gradient, so the
  // replicated embedding gets the same (complete) gradient on every rank.
  phase.paused([&] { all_gather_sequence(d_full, dx, tp_); });
  model.embedding.backward(d_full, batch.tokens);
  phase.close();
  return loss;
}

void SequenceParallelPart::synchronise(GPT& model) {
  std::vector<Block*> blocks;
  for (Block& block : model.blocks) blocks.push_back(&block);
  all_reduce_layernorm_grads(blocks, tp_);
  // (fp16: a sharded weight's overflow is only on its owner: the found-inf flag is agreed over tp,
  // the part's model group.)
}

}  // namespace mgpu::parallel

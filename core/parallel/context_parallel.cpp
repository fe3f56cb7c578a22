// Context parallelism, top to bottom (see context_parallel.h for the idea):
//   1. which tokens each rank holds (contiguous, zigzag, ulysses, chunked) and the size checks;
//   2. set-up: attention, where the ranks meet, is ring attention (ring_attention.cpp) or
//      Ulysses (ulysses.cpp), the block's AttentionComm;
//   3. one step: my columns of the batch, forward, backward, gradients averaged over cp.
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
  if (cp > 1)  // a sequence is the routing's group: its capacity and aux loss count it whole
    refuse_experts(cfg, "context parallelism",
                   "its ranks each hold part of every sequence; drop --experts or use data "
                   "parallelism");
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
  // A rank's query heads must read whole kv heads (or one copied kv head: ulysses.cpp).
  if (layout == CpLayout::ulysses && ulysses_kv_heads(cfg.kv_head_count(), cp) == 0)
    throw std::invalid_argument(fmt::format(
        "ulysses gives each rank the kv heads its query heads read: {} kv heads over {} ranks "
        "need cp to divide them or be a multiple of them; use --kv-heads {} or --cp-layout zigzag",
        cfg.kv_head_count(), cp, cp));
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
      const size_t at = size_t(row) * size_t(batch.T) + size_t(pos);
      if (!batch.tokens.empty()) mine.tokens.push_back(batch.tokens[at]);
      if (!batch.targets.empty()) mine.targets.push_back(batch.targets[at]);
    }
  return mine;
}

// ---------------------------------------------------------------------------------- set-up

ContextParallelPart::ContextParallelPart(const GPTConfig& cfg, comm::Comm& cp, CpLayout layout,
                                         int seq, const CpSeams& seams)
    : cp_(cp), seq_(seq), communicates_(layout != CpLayout::chunked && cp.size() > 1) {
  check_cp_size(cfg, seq, cp.size(), layout);
  positions_ = cp_positions(seq, cp.size(), cp.rank(), layout);
  // Attention is where the ranks meet: ring attention (contiguous, zigzag; its K/V ring is in
  // ring_attention.cpp) or Ulysses' all-to-alls (ulysses.cpp). Chunked attends within its chunk.
  if (layout == CpLayout::ulysses)
    attention_ = std::make_unique<UlyssesAttention>(cp, seq);
  else
    attention_ = std::make_unique<RingAttention>(cp, layout, seq, seams);
}

void ContextParallelPart::shard_blocks(BlockShard& shard) const {
  // Ring attention and Ulysses keep the rank's rows of the whole sequence's score matrix
  // ([T/cp, T] per head, or [T, T] for H/cp heads: the same size); chunked keeps only its own
  // chunk's [T/cp, T/cp].
  if (communicates_) shard.attention_keys = seq_;
}

void ContextParallelPart::attach(GPT& model, TracePhase& phase) {
  model.set_positions(positions_);
  if (communicates_) model.set_block_comm({.attention = attention_.get(), .phase = &phase});
}

data::Batch ContextParallelPart::share(const data::Batch& batch) {
  if (batch.T != seq_)
    throw std::invalid_argument(fmt::format(
        "context parallelism was set up for sequences of {} tokens, got {}", seq_, batch.T));
  // My columns of every sequence (inputs and targets alike): B x T/cp tokens. My tokens' mean
  // loss is the rank's; the ranks' shares are equal, so their mean is the batch's mean.
  return batch_columns(batch, positions_);
}

void ContextParallelPart::synchronise(GPT& model) {
  // Each rank's gradient is d(its tokens' mean)/dW: their average is d(batch mean)/dW.
  // (Blocking, one tensor at a time: the sum then runs in the same order on threads and under
  // mpirun, so both give the same bits.) fp16: every rank then sees the same overflow; the flag
  // is still agreed over cp, so a rank's own (injected) overflow skips the step everywhere.
  if (cp_.size() > 1)
    for (Param* p : model.params()) cp_.all_reduce(p->grad, comm::ReduceOp::avg);
}

std::unique_ptr<MeshLayout> context_parallel(const GPTConfig& cfg, comm::Comm& cp, CpLayout layout,
                                             int seq, const train::OptimizerFactory& make_optimizer,
                                             const CpSeams& seams, std::shared_ptr<Mesh> mesh) {
  return std::make_unique<MeshLayout>(
      cfg, std::make_unique<ContextParallelPart>(cfg, cp, layout, seq, seams), make_optimizer,
      std::move(mesh));
}

}  // namespace mgpu::parallel

// Context parallelism: the cp ranks of a group split every SEQUENCE of the batch, each holding
// T/cp of its tokens through the whole model (all weights on every rank). Everything but
// attention is per token, so it runs locally; attention needs every earlier token's keys and
// values. Ring attention: K/V blocks travel around the ring cp-1 times (isend/irecv of the next
// block overlapping attention on the current one), and each block's partial result is merged in
// with the log-sum-exp (online softmax) rule; backward sends the K/V round again, with their dK/dV
// accumulating on the way back to their owners. Parameter gradients are all-reduced over cp.
// Layouts (--cp-layout): contiguous (rank r holds chunk r: the last rank does most of the causal
// work), zigzag (chunks r and 2cp-1-r: balanced), ulysses (all-to-all from sequence- to
// head-sharded and back, then plain attention), chunked (attention within the rank's chunk only:
// no communication, and a different, worse model).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/model/trace_phase.h"
#include "core/optim/optimizer.h"
#include "core/parallel/mesh_layout.h"
#include "core/runtime/context.h"
#include "core/train/layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

enum class CpLayout { contiguous, zigzag, ulysses, chunked };
const char* cp_layout_name(CpLayout layout);
// Throws std::invalid_argument naming the layouts.
CpLayout parse_cp_layout(const std::string& text);

// Throws std::invalid_argument (one line: what is wrong, what would work) unless `seq` splits
// into the layout's chunks (2*cp for zigzag, cp otherwise) and, for ulysses, cp divides the heads
// and divides or is a multiple of the kv heads (ulysses_kv_heads).
void check_cp_size(const GPTConfig& cfg, int seq, int cp, CpLayout layout);
// The global positions of cp rank `rank`'s tokens, ascending (zigzag: chunks rank, 2cp-1-rank).
std::vector<int32_t> cp_positions(int seq, int cp, int rank, CpLayout layout);
// The tokens (and targets) of every sequence of `batch` at `positions`: B x positions.size().
data::Batch batch_columns(const data::Batch& batch, const std::vector<int32_t>& positions);

// ------------------------------------------------------------------ exercise 07 seams
// The online-softmax merge (docs/exercises/07-online-softmax-merge.md): solutions/ holds the
// reference, exercises/ the student's; `--impl` picks which table the program hands to the
// layouts it builds, and ring attention runs the merge it was given.
//   merge:    (out, lse) <- the attention result over both key sets, from two partial results
//             over disjoint key sets: out [B,T,C] (H heads of C/H channels), lse [B,H,T] f32
//             (-inf: that part saw no key).
//   backward: the gradient reaching ONE part (the bonus): d_part_out = w * dout and
//             d_part_lse = w * (dout . (part_out - out)) per head, w = exp(part_lse - lse).
using MergeFn =
    std::function<void(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse)>;
using MergeBackwardFn = std::function<void(Tensor& d_part_out, Tensor& d_part_lse,
                                           const Tensor& dout, const Tensor& out, const Tensor& lse,
                                           const Tensor& part_out, const Tensor& part_lse)>;
struct CpSeams {
  std::string impl_name;  // "reference" or "mine"
  MergeFn merge;
  MergeBackwardFn merge_backward;
};

// Ring attention (contiguous or zigzag), context parallelism's attention on the cp group `cp`:
// every rank's token positions, the K|V ring forward, the K|V + dK|dV ring backward. Under
// grouped-query attention only the kv heads travel: 2*KV*D per token, KV/H of multi-head's.

class RingAttention : public AttentionComm {
 public:
  // `cp` must outlive this; `seq` is the global sequence length T. (Every layout's positions are
  // kept; only contiguous and zigzag run the ring.) `seams`: exercise 07's merge.
  RingAttention(comm::Comm& cp, CpLayout layout, int seq, CpSeams seams);
  void forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
               const AttentionHeads& heads, const std::string& category) override;
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                const Tensor& att, const Tensor& lse, const AttentionHeads& heads,
                const std::string& category) override;
  const std::vector<int32_t>& positions() const { return positions_[cp_.rank()]; }

 private:
  template <class OnBlock, class AfterStep>
  void ring_pass(const Tensor& qkv, const AttentionHeads& heads, const std::string& category,
                 OnBlock&& on_block, AfterStep&& after_step);

  comm::Comm& cp_;
  CpSeams seams_;
  std::vector<std::vector<int32_t>> positions_;  // every cp rank's token positions
};

// The kv heads Ulysses spreads over `cp` ranks: kv_heads itself when cp divides it (each rank
// gets KV/cp of them, the ones its H/cp query heads read); cp when kv_heads divides cp (KV < cp:
// each kv head is copied cp/KV times before the all-to-all, so that every rank receives the one
// kv head its query heads read, and the copies' gradients are summed after the backward). 0 when
// neither divides the other (a rank's query heads would read parts of two kv heads).
int ulysses_kv_heads(int kv_heads, int cp);

// Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023), context parallelism's other attention: an
// all-to-all turns my T/cp tokens of every head into the whole sequence of cp-th of the heads,
// plain attention runs on those, and an all-to-all turns the result back. `seq`: the whole T.
// Grouped-query attention: q's H heads and k's, v's KV heads are split separately, groups kept
// together (rank d: query heads d*H/cp.., kv heads d*KV/cp..); with KV < cp the kv heads are
// replicated first (ulysses_kv_heads), trading all-to-all bytes for not refusing the run.
class UlyssesAttention : public AttentionComm {
 public:
  UlyssesAttention(comm::Comm& cp, int seq) : cp_(cp), seq_(seq) {}
  void forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv,
               const AttentionHeads& heads, const std::string& category) override;
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                const Tensor& att, const Tensor& lse, const AttentionHeads& heads,
                const std::string& category) override;

 private:
  // Sequence-sharded [B, T/cp, sum(widths)] <-> head-sharded [B, T, sum(widths)/cp]: each of
  // the row's parts (q | k | v, or out alone) is split into cp slices of its width / cp.
  Tensor to_heads(const Tensor& by_sequence, const std::vector<int64_t>& widths,
                  const std::string& category);
  void to_sequence(Tensor& by_sequence, const Tensor& by_heads, const std::vector<int64_t>& widths,
                   const std::string& category);
  comm::Comm& cp_;
  int seq_;
};

// Context parallelism as a part of the mesh engine (core/parallel/mesh_layout.h): every rank holds
// the whole seeded model and its columns of every sequence (cp_positions); attention meets the
// other ranks (ring or Ulysses; chunked: no communication); the gradients are averaged over cp.
class ContextParallelPart : public MeshPart {
 public:
  // `seq` is the global sequence length T (every step's batch has it). `cp` must outlive this.
  // `seams`: exercise 07's merge, which ring attention runs.
  ContextParallelPart(const GPTConfig& cfg, comm::Comm& cp, CpLayout layout, int seq,
                      const CpSeams& seams);
  std::string name() const override { return "context_parallel"; }
  void shard_blocks(BlockShard& shard) const override;
  void attach(GPT& model, TracePhase& phase) override;
  data::Batch share(const data::Batch& global_batch) override;
  void synchronise(GPT& model) override;
  std::vector<comm::Comm*> model_groups() override { return {&cp_}; }
  bool loss_is_shard() const override { return true; }
  bool writes(const Param&) const override { return cp_.rank() == 0; }  // rank 0's copy
  const std::vector<int32_t>& positions() const { return positions_; }

 private:
  comm::Comm& cp_;
  int seq_;
  bool communicates_;                         // not chunked, and more than one rank
  std::vector<int32_t> positions_;            // my tokens' global positions
  std::unique_ptr<AttentionComm> attention_;  // ring or Ulysses
};

// One rank of a context-parallel run: the mesh engine with the cp part. `mesh`: the mesh `cp`
// comes from, kept alive by the layout (null when the caller keeps the group).
std::unique_ptr<MeshLayout> context_parallel(const GPTConfig& cfg, comm::Comm& cp, CpLayout layout,
                                             int seq, const train::OptimizerFactory& make_optimizer,
                                             const CpSeams& seams,
                                             std::shared_ptr<Mesh> mesh = nullptr);

// Zeroed workspace for context parallelism's exchanges (ring attention and Ulysses both use it).
inline Tensor scratch(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::zeros(shape, MemCategory::workspace, dtype);
}

}  // namespace mgpu::parallel

// Tensor parallelism (Megatron-LM): every rank of a tp group holds a slice of every block and all
// of them work on the same batch at once. Attention's QKV and the MLP's first linear are
// column-parallel (each rank owns heads / hidden units: its rows of W), the attention projection
// and the MLP's second linear are row-parallel (each rank owns the matching input columns, and
// the partial outputs are summed). Two conjugate operators place the communication:
//   f: identity forward, all-reduce backward      (before a column-parallel linear)
//   g: all-reduce forward, identity backward      (after a row-parallel linear)
// So per block: 2 all-reduces forward + 2 backward, each of B*T*C elements, in the tp group.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/model/trace_phase.h"
#include "core/optim/optimizer.h"
#include "core/parallel/mesh_layout.h"
#include "core/runtime/context.h"
#include "core/train/layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

// ------------------------------------------------------------------ f and g (Megatron's names)
void f_forward(Tensor& x, comm::Comm& tp);    // identity
void f_backward(Tensor& dx, comm::Comm& tp);  // all-reduce (sum) of the input's gradient
void g_forward(Tensor& y, comm::Comm& tp);    // all-reduce (sum) of the partial outputs
void g_backward(Tensor& dy, comm::Comm& tp);  // identity

// Where 2-byte activations' partial results are summed (an all-reduce or reduce-scatter of
// partial products): in fp32, rounded once, so TP computes the single-device model's numbers (4 B
// per element on the wire); or in the activations' type, as Megatron-LM sends them (2 B).
enum class PartialSums { fp32, activation_dtype };

// ------------------------------------------------------------------ the collectives f and g use
// f and g are the same two collectives over the tp group, swapped (they are conjugate):
//   f (before a column-parallel linear): gather forward, sum backward
//   g (after a row-parallel linear):     sum forward,    gather backward
// The layout passes them to exercise 06's linears. Tensor parallelism: gather is the identity
// (every rank holds the whole input) and sum an all-reduce. Sequence parallelism: gather is an
// all-gather along the sequence and sum a reduce-scatter to my tokens (sequence_parallel.h).
class LinearCollectives {
 public:
  LinearCollectives(comm::Comm& tp, PartialSums sums) : tp_(tp), sums_(sums) {}
  virtual ~LinearCollectives() = default;
  // The whole tensor, from my part of it (TP: `mine` itself).
  virtual Tensor gather(const Tensor& mine) = 0;
  // A buffer for the partial results whose sum() is `mine`: shaped like the whole tensor, in fp32
  // when 2-byte partial results are summed in fp32 (TP in fp32: `mine` itself).
  virtual Tensor partial_buffer(const Tensor& mine) = 0;
  // mine = my part of the sum of every rank's `partial` (TP: all of it).
  virtual void sum(Tensor& mine, Tensor& partial) = 0;
  comm::Comm& group() { return tp_; }
  // Whether a partial result for the 2-byte tensor `t` is summed in fp32.
  bool sums_in_fp32(const Tensor& t) const {
    return t.dtype() != DType::f32 && sums_ == PartialSums::fp32;
  }

 protected:
  comm::Comm& tp_;
  PartialSums sums_;
};

// Tensor parallelism's: gather is the identity, sum an all-reduce.
class TensorParallelCollectives : public LinearCollectives {
 public:
  explicit TensorParallelCollectives(comm::Comm& tp, PartialSums sums = PartialSums::fp32)
      : LinearCollectives(tp, sums) {}
  Tensor gather(const Tensor& mine) override;
  Tensor partial_buffer(const Tensor& mine) override;
  void sum(Tensor& mine, Tensor& partial) override;
};

// ------------------------------------------------------------------ exercise 06 seams
// The column- and row-parallel linear (docs/exercises/06-tensor-parallel.md): solutions/ holds
// the reference, exercises/ the student's; `--impl` picks which table the program hands to every
// layout it builds (exercises/selection.h), and each layout keeps the table it was given. TP and SP
// both run them; `c` says which collectives f and g are made of.
//   column: y_local = f(x) @ w_local^T + b_local          w_local: my rows of W [out/t, in]
//   row:    y       = g(x_local @ w_local^T) + b          w_local: my columns of W [out, in/t];
//                                                         b is defined on one rank only
// Backward: the conjugate's backward where it gathers, the linear's backward (dw_local, db
// ACCUMULATE; dx overwritten), the conjugate's backward where it sums.
using ColumnForwardFn = std::function<void(Tensor& y_local, const Tensor& x, const Tensor& w_local,
                                           const Tensor& b_local, LinearCollectives& c)>;
using ColumnBackwardFn =
    std::function<void(Tensor& dx, Tensor& dw_local, Tensor& db_local, const Tensor& dy_local,
                       const Tensor& x, const Tensor& w_local, LinearCollectives& c)>;
using RowForwardFn = std::function<void(Tensor& y, const Tensor& x_local, const Tensor& w_local,
                                        const Tensor& b, LinearCollectives& c)>;
using RowBackwardFn =
    std::function<void(Tensor& dx_local, Tensor& dw_local, Tensor& db, const Tensor& dy,
                       const Tensor& x_local, const Tensor& w_local, LinearCollectives& c)>;

struct TpSeams {
  std::string impl_name;  // "reference" or "mine"
  ColumnForwardFn column_forward;
  ColumnBackwardFn column_backward;
  RowForwardFn row_forward;
  RowBackwardFn row_backward;
};
// Throws std::logic_error naming the first missing function (a layout checks its table once,
// when it is built, rather than failing inside a block).
void check_seams(const TpSeams& seams);

// ------------------------------------------------------------------ sharding
// Whether tp >= 1 divides the heads, the kv heads and the MLP's hidden width F (4 * dim for
// GPT-2). Grouped-query attention: each rank holds kv_heads / tp whole kv heads and the query
// heads that read them, so tp must divide kv_heads (Megatron-LM's rule; a tp above kv_heads would
// need each kv head copied to several ranks and its gradient summed among them: refused, naming
// the sizes that work).
bool tp_divides(const GPTConfig& cfg, int tp);
// What tp must divide, as "the heads (12) and the MLP width 4*dim (3072)" (GQA and a set F say
// so), for the refusals.
std::string tp_divides_what(const GPTConfig& cfg);
// Throws std::invalid_argument (one line, naming the tp sizes that work) unless tp_divides.
void check_tp_size(const GPTConfig& cfg, int tp);
// tp rank `rank`'s heads [head_begin, head_end), kv heads [kv_begin, kv_end) and hidden units
// [hidden_begin, hidden_end).
struct TpSlice {
  int head_begin = 0, head_end = 0;
  int hidden_begin = 0, hidden_end = 0;
  int kv_begin = 0, kv_end = 0;
  BlockShard block() const {
    return {.heads = head_end - head_begin,
            .hidden = hidden_end - hidden_begin,
            .kv_heads = kv_end - kv_begin};
  }
};
TpSlice tp_slice(const GPTConfig& cfg, int tp, int rank);

// ------------------------------------------------------------------ pieces for layouts built on TP
// (hybrid DP x TP x PP builds pipeline stages out of tensor-parallel blocks with these.)
// Declares how tensor parallelism splits a block (declared, not yet materialised) for `slice`:
// q, k, v and fc split by rows (column-parallel), the two projections by columns (row-parallel).
void split_block(Block& block, const GPTConfig& cfg, const TpSlice& slice);
// Every parameter and its optimizer state, mapped into the full model by their specs.
// `writes_split` / `writes_replicated`: whether this rank's copy of a tp-split / tp-replicated
// tensor is the one the checkpoint takes.
std::vector<train::TensorShard> tp_shards(const ParamList& params, optim::Optimizer& optimizer,
                                          bool writes_split, bool writes_replicated);

// Tensor parallelism's communication in a block: the four linears through exercise 06's functions
// `seams` on group `tp` (f before the column-parallel ones, g after the row-parallel ones), made
// of `collectives` (TP's by default; sequence parallelism passes its own).
class TensorParallelComm : public LinearComm {
 public:
  TensorParallelComm(comm::Comm& tp, TpSeams seams, PartialSums sums = PartialSums::fp32);
  TensorParallelComm(TpSeams seams, std::unique_ptr<LinearCollectives> collectives);
  void column_forward(const Linear& linear, Tensor& out, const Tensor& inp) override;
  void column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                       const Tensor& inp) override;
  void row_forward(const Linear& linear, Tensor& out, const Tensor& inp) override;
  void row_backward(Linear& linear, Tensor& dinp, const Tensor& dout, const Tensor& inp) override;
  void column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) override;

 private:
  TpSeams seams_;
  std::unique_ptr<LinearCollectives> collectives_;
};

// An fp32 buffer shaped like `like`, for summing 2-byte partial results in fp32.
Tensor fp32_partial(const Tensor& like);

// Tensor parallelism as a part of the mesh engine (core/parallel/mesh_layout.h): every block cut
// to this rank's slice over `tp` (its PartitionSpecs: split_block), f and g at the four linears,
// the head whole or split over the vocabulary. Every tp rank trains on the whole batch, and no
// gradient needs synchronising. `tp` must outlive the part. `seams`: exercise 06's linears.
class TensorParallelPart : public MeshPart {
 public:
  TensorParallelPart(const GPTConfig& cfg, comm::Comm& tp, const TpSeams& seams,
                     bool vocab_parallel_head = false);
  std::string name() const override { return "tensor_parallel"; }
  void shard_blocks(BlockShard& shard) const override;
  void split(GPT& model) override;
  void attach(GPT& model, TracePhase& phase) override;
  std::vector<comm::Comm*> model_groups() override { return {&tp_}; }
  bool writes(const Param& p) const override;
  const TpSlice& slice() const { return slice_; }

 protected:
  // For parts that are TP with other communication at the same points (sequence parallelism):
  // the same slices, with the blocks' layernorm/residual regions split into `seq_parts`, and
  // `linears` at the four points.
  TensorParallelPart(const GPTConfig& cfg, comm::Comm& tp, std::unique_ptr<LinearComm> linears,
                     int seq_parts, bool vocab_parallel_head);

  GPTConfig config_;
  comm::Comm& tp_;
  std::unique_ptr<LinearComm> linears_;  // TP: f and g through exercise 06's functions
  int seq_parts_;
  bool vocab_parallel_head_;
  TpSlice slice_;
  std::unique_ptr<HeadComm> head_comm_;  // the vocabulary-parallel head's, else null
};

// One rank of a tensor-parallel run: the mesh engine with the tp part. `mesh`: the mesh `tp`
// comes from, kept alive by the layout (null when the caller keeps the group).
std::unique_ptr<MeshLayout> tensor_parallel(const GPTConfig& cfg, comm::Comm& tp,
                                            const train::OptimizerFactory& make_optimizer,
                                            const TpSeams& seams, bool vocab_parallel_head = false,
                                            std::shared_ptr<Mesh> mesh = nullptr);

}  // namespace mgpu::parallel

// Graded: exercise 06, the column- and row-parallel linear (docs/exercises/06-tensor-parallel.md).
// The installed seam functions run on 1, 2 and 4 rank threads, each rank holding its slice of one
// full linear; outputs and gradients are compared with the unsharded linear (ops::linear_*), and
// the number of all-reduces each one issues is counted from the trace. The last case runs them
// with sequence parallelism's collectives, each rank holding its tokens outside the linears.
// The Llama case trains a whole model of Llama's block (a SwiGLU MLP, grouped-query attention, no
// biases) through the installed functions and compares its parameters with one device's.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/data/task.h"
#include "core/model/param.h"
#include "core/ops/ops.h"
#include "core/parallel/sequence_parallel.h"
#include "core/parallel/tensor_parallel.h"
#include "core/run/run.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {
constexpr int64_t B = 2, T = 3, IN = 8, OUT = 12;

std::vector<float> values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + scale);
  return v;
}

struct Full {  // the unsharded linear's results
  std::vector<float> y, dx, dw, db;
};

// On a [B, seq, in] batch (seq = T but for the sequence-parallel case).
Full unsharded(const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& dy, int64_t in, int64_t out,
               int64_t seq = T) {
  Full f;
  World one(grade::local_world(1));
  one.run([&](RankContext&) {
    Tensor X = Tensor::from({B, seq, in}, x), W = Tensor::from({out, in}, w),
           Bi = Tensor::from({out}, b), DY = Tensor::from({B, seq, out}, dy);
    Tensor Y = Tensor::zeros({B, seq, out}, MemCategory::activations);
    Tensor DX = Tensor::zeros({B, seq, in}, MemCategory::workspace);
    Tensor DW = Tensor::zeros({out, in}, MemCategory::gradients);
    Tensor DB = Tensor::zeros({out}, MemCategory::gradients);
    ops::linear_forward(Y, X, W, Bi);
    ops::linear_backward(DX, DW, DB, DY, X, W);
    f = {Y.to_vector(), DX.to_vector(), DW.to_vector(), DB.to_vector()};
  });
  return f;
}

// The elements of `full` that `spec` keeps, in the local tensor's order: the same PartitionSpec
// the tensor-parallel layout declares on each parameter (core/model/param.h).
std::vector<float> cut(const std::vector<float>& full, const PartitionSpec& spec) {
  std::vector<float> local;
  for (const ShardRun& run : spec.runs)
    local.insert(local.end(), full.begin() + run.full_offset,
                 full.begin() + run.full_offset + run.length);
  return local;
}

// Rows [r0, r1) / columns [c0, c1) of a row-major [rows, cols] matrix (a [B, T, cols] tensor is
// B*T rows; a vector is one column).
std::vector<float> rows(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1) {
  const int64_t n = static_cast<int64_t>(m.size()) / cols;
  return cut(m, PartitionSpec::rows({n, cols}, {{r0, r1}}));
}
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t c0, int64_t c1) {
  const int64_t n = static_cast<int64_t>(m.size()) / cols;
  return cut(m, PartitionSpec::columns({n, cols}, c0, c1));
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
}

int all_reduces_on_rank0(const World& world) {
  int n = 0;
  for (const trace::Event& e : world.collect_trace().events)
    if (e.rank == 0 && e.lane == trace::Lane::comm && e.op == "all_reduce") ++n;
  return n;
}

// What one rank computed: checked on the main thread after the run, since Catch's assertions
// are not thread-safe (rank threads only compute and store).
struct RankResult {
  int64_t begin = 0, end = 0;  // the rank's slice: output rows (column) or input columns (row)
  std::vector<float> y, dx, dw, db;
};

// Which dimension of W is split over the ranks: column-parallel splits the outputs (rank r owns
// output rows [r*OUT/t, (r+1)*OUT/t) of W and b, and sees all of x); row-parallel splits the
// inputs (rank r owns input columns [r*IN/t, (r+1)*IN/t) of W and of x; rank 0 adds the bias).
enum class Split { column, row };

// The sharded linear on `tp` rank threads against the unsharded one: each rank's outputs and
// gradients, and the all-reduces it issued.
void check_sharded(Split split, int tp, bool backward) {
  const bool column = split == Split::column;
  INFO((column ? "column" : "row") << "-parallel, tp = " << tp);
  const auto x = values(B * T * IN, 1.0f), w = values(OUT * IN, 0.5f), b = values(OUT, 0.3f),
             dy = values(B * T * OUT, 0.8f);
  const Full want = unsharded(x, w, b, dy, IN, OUT);
  const int64_t split_size = column ? OUT : IN;
  std::vector<RankResult> got(static_cast<size_t>(tp));
  World world(grade::local_world(tp));
  world.run([&](RankContext& ctx) {
    comm::Comm& group = *ctx.comm;
    RankResult& mine = got[static_cast<size_t>(ctx.rank)];
    const int64_t s0 = group.rank() * split_size / tp, s1 = (group.rank() + 1) * split_size / tp;
    mine.begin = s0, mine.end = s1;
    const int64_t in = column ? IN : s1 - s0, out = column ? s1 - s0 : OUT;  // this rank's W
    Tensor X = Tensor::from({B, T, in}, column ? x : columns(x, IN, s0, s1));
    Tensor W = Tensor::from({out, in}, column ? rows(w, IN, s0, s1) : columns(w, IN, s0, s1));
    Tensor Bi = column              ? Tensor::from({out}, rows(b, 1, s0, s1))
                : group.rank() == 0 ? Tensor::from({OUT}, b)
                                    : Tensor();
    const parallel::TpSeams& seams = ex::selected_seams().tp;
    parallel::TensorParallelCollectives tp_collectives(group);
    Tensor Y = Tensor::zeros({B, T, out}, MemCategory::activations);
    (column ? seams.column_forward : seams.row_forward)(Y, X, W, Bi, tp_collectives);
    mine.y = Y.to_vector();
    if (!backward) return;
    Tensor DY = Tensor::from({B, T, out}, column ? columns(dy, OUT, s0, s1) : dy);
    Tensor DX = Tensor::zeros({B, T, in}, MemCategory::workspace);
    Tensor DW = Tensor::zeros(W.shape(), MemCategory::gradients);
    Tensor DB = Tensor::zeros({out}, MemCategory::gradients);
    (column ? seams.column_backward : seams.row_backward)(DX, DW, DB, DY, X, W, tp_collectives);
    mine.dx = DX.to_vector(), mine.dw = DW.to_vector(), mine.db = DB.to_vector();
  });
  for (const RankResult& r : got) {
    const int64_t s0 = r.begin, s1 = r.end;
    if (column) {
      check_close(r.y, columns(want.y, OUT, s0, s1), "y_local: my output columns");
    } else {
      check_close(r.y, want.y, "y: the full output on every rank (g's forward, bias once)");
    }
    if (!backward) continue;
    if (column) {
      check_close(r.dx, want.dx, "dx: the full input gradient on every rank (f's backward)");
      check_close(r.dw, rows(want.dw, IN, s0, s1), "dw_local");
      check_close(r.db, rows(want.db, 1, s0, s1), "db_local");
    } else {
      check_close(r.dx, columns(want.dx, IN, s0, s1), "dx_local: my input columns");
      check_close(r.dw, columns(want.dw, IN, s0, s1), "dw_local");
      check_close(r.db, want.db, "db: the whole bias gradient on every rank");
    }
  }
  // Column: f is the identity forward and one all-reduce backward. Row: g is one all-reduce
  // forward and the identity backward. On one rank the all-reduce may be skipped.
  const int expected = column && !backward ? 0 : 1;
  const int issued = all_reduces_on_rank0(world);
  if (tp > 1)
    CHECK(issued == expected);
  else
    CHECK(issued <= expected);
}

// Rank r's tokens [r*seq/t, (r+1)*seq/t) of every sequence of a [batch, seq, cols] tensor.
std::vector<float> my_tokens(const std::vector<float>& m, int64_t seq, int64_t cols, int r, int t) {
  std::vector<float> mine;
  const int64_t batch = static_cast<int64_t>(m.size()) / (seq * cols), n = seq / t;
  for (int64_t b = 0; b < batch; ++b) {
    const auto part = rows(m, cols, b * seq + r * n, b * seq + (r + 1) * n);
    mine.insert(mine.end(), part.begin(), part.end());
  }
  return mine;
}

// Sequence parallelism on `tp` rank threads: the column linear's input and the row linear's output
// are this rank's tokens, so the linears' gather and sum are an all-gather and a reduce-scatter.
void check_sequence_parallel(int tp) {
  INFO("sequence parallelism, tp = " << tp);
  constexpr int64_t S = 4;  // a sequence that 2 and 4 ranks cut into equal parts
  const auto x = values(B * S * IN, 1.0f), w = values(OUT * IN, 0.5f), b = values(OUT, 0.3f),
             dy = values(B * S * OUT, 0.8f);
  std::vector<float> h = values(B * S * OUT, 0.6f);  // the row linear's input (OUT wide, to IN)
  const auto wr = values(IN * OUT, 0.4f), br = values(IN, 0.2f), dyr = values(B * S * IN, 0.7f);
  const Full column = unsharded(x, w, b, dy, IN, OUT, S),
             row = unsharded(h, wr, br, dyr, OUT, IN, S);
  std::vector<RankResult> got_column(static_cast<size_t>(tp)), got_row(got_column.size());
  World world(grade::local_world(tp));
  world.run([&](RankContext& ctx) {
    comm::Comm& group = *ctx.comm;
    const int r = group.rank();
    const int64_t o0 = r * OUT / tp, o1 = (r + 1) * OUT / tp, n = S / tp;
    const parallel::TpSeams& seams = ex::selected_seams().tp;
    parallel::SequenceParallelCollectives sp(group);
    // Column: my tokens in, my output columns of the whole sequence out.
    Tensor X = Tensor::from({B, n, IN}, my_tokens(x, S, IN, r, tp));
    Tensor W = Tensor::from({o1 - o0, IN}, rows(w, IN, o0, o1));
    Tensor Bi = Tensor::from({o1 - o0}, rows(b, 1, o0, o1));
    Tensor Y = Tensor::zeros({B, S, o1 - o0}, MemCategory::activations);
    seams.column_forward(Y, X, W, Bi, sp);
    Tensor DY = Tensor::from({B, S, o1 - o0}, columns(dy, OUT, o0, o1));
    Tensor DX = Tensor::zeros({B, n, IN}, MemCategory::workspace);
    Tensor DW = Tensor::zeros(W.shape(), MemCategory::gradients);
    Tensor DB = Tensor::zeros({o1 - o0}, MemCategory::gradients);
    seams.column_backward(DX, DW, DB, DY, X, W, sp);
    got_column[size_t(r)] = {o0, o1, Y.to_vector(), DX.to_vector(), DW.to_vector(), DB.to_vector()};
    // Row: my input columns of the whole sequence in, my tokens of the summed output out.
    Tensor H = Tensor::from({B, S, o1 - o0}, columns(h, OUT, o0, o1));
    Tensor WR = Tensor::from({IN, o1 - o0}, columns(wr, OUT, o0, o1));
    Tensor BR = r == 0 ? Tensor::from({IN}, br) : Tensor();
    Tensor YR = Tensor::zeros({B, n, IN}, MemCategory::activations);
    seams.row_forward(YR, H, WR, BR, sp);
    Tensor DYR = Tensor::from({B, n, IN}, my_tokens(dyr, S, IN, r, tp));
    Tensor DH = Tensor::zeros(H.shape(), MemCategory::workspace);
    Tensor DWR = Tensor::zeros(WR.shape(), MemCategory::gradients);
    Tensor DBR = Tensor::zeros({IN}, MemCategory::gradients);
    seams.row_backward(DH, DWR, DBR, DYR, H, WR, sp);
    got_row[size_t(r)] = {o0, o1, YR.to_vector(), DH.to_vector(), DWR.to_vector(), DBR.to_vector()};
  });
  for (int r = 0; r < tp; ++r) {
    const RankResult &c = got_column[size_t(r)], &w_ = got_row[size_t(r)];
    check_close(c.y, columns(column.y, OUT, c.begin, c.end),
                "column y_local: my columns, all tokens");
    check_close(c.dx, my_tokens(column.dx, S, IN, r, tp), "column dx: my tokens of the sum");
    check_close(c.dw, rows(column.dw, IN, c.begin, c.end), "column dw_local");
    check_close(c.db, rows(column.db, 1, c.begin, c.end), "column db_local");
    check_close(w_.y, my_tokens(row.y, S, IN, r, tp), "row y: my tokens of the sum, bias once");
    check_close(w_.dx, columns(row.dx, OUT, w_.begin, w_.end), "row dx_local: my input columns");
    check_close(w_.dw, columns(row.dw, OUT, w_.begin, w_.end), "row dw_local");
    check_close(w_.db, row.db, "row db: the whole bias gradient on every rank");
  }
}
// A Llama-shaped model (4 query heads sharing 2 kv heads, SwiGLU of width 24, RMSNorm, RoPE, no
// biases) trained 2 SGD steps on `ranks` ranks, its parameters placed as the single device's.
std::map<std::string, std::vector<float>> llama_trained(run::Parallelism parallelism, int ranks) {
  run::RunSpec spec;
  spec.task = data::make_task("reverse", 7, {.seq_len = 8});
  spec.model = {.vocab = spec.task->vocab_size(), .seq_len = 8, .layers = 2, .dim = 16, .heads = 4};
  spec.model.style = {.norm = Norm::rmsnorm,
                      .mlp = MlpKind::swiglu,
                      .ffn_dim = 24,
                      .positions = Positions::rope,
                      .kv_heads = 2,
                      .bias = false};
  spec.world = grade::local_world(ranks);
  spec.world.all_reduce = ex::selected_seams().comm.all_reduce;
  spec.train.steps = 2;
  spec.train.global_batch = 4;
  spec.train.seq = 8;
  spec.train.keep_params = true;
  spec.optimizer = [](const ParamList& params) {
    optim::SGDOptions o;
    o.lr = 0.05f;
    return std::make_unique<optim::SGD>(optim::whole_params(params), o);
  };
  spec.parallelism = std::move(parallelism);
  std::map<std::string, std::vector<float>> params;
  for (const CheckpointTensor& t : run::run(spec).trained.params) params[t.name] = t.values;
  return params;
}
}  // namespace

TEST_CASE("ex06 column-parallel forward gives each rank its output columns (2 pts)",
          "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_sharded(Split::column, tp, false);
}

TEST_CASE("ex06 column-parallel backward all-reduces the input gradient (3 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_sharded(Split::column, tp, true);
}

TEST_CASE("ex06 row-parallel forward all-reduces the partial outputs (3 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_sharded(Split::row, tp, false);
}

TEST_CASE("ex06 row-parallel backward needs no communication (2 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_sharded(Split::row, tp, true);
}

TEST_CASE(
    "ex06 the same linears under sequence parallelism gather and sum along the sequence (2 pts)",
    "[grade][ex06]") {
  for (int tp : {2, 4}) check_sequence_parallel(tp);
}

TEST_CASE("ex06 a Llama block on your linears: SwiGLU and grouped-query heads split (3 pts)",
          "[grade][ex06]") {
  // Each rank holds 2 of the 4 query heads and 1 of the 2 kv heads (qkv's rows: q, k and v), and
  // 12 of SwiGLU's 24 units (the gate row and the up row of each), with no biases anywhere: the
  // column linears' bias is undefined on every rank, and so is the row linears'.
  const auto one = llama_trained(run::SingleDevice{}, 1);
  const auto tp = llama_trained(run::TensorParallel{.seams = ex::selected_seams().tp}, 2);
  REQUIRE(one.size() == tp.size());
  for (const auto& [name, values] : one) {
    INFO(name);
    REQUIRE(tp.count(name) == 1);
    check_close(tp.at(name), values, "a parameter after 2 steps: tp = 2 against one device");
  }
}

// Graded: exercise 06, the column- and row-parallel linear (docs/exercises/06-tensor-parallel.md).
// The installed seam functions run on 1, 2 and 4 rank threads, each rank holding its slice of one
// full linear; outputs and gradients are compared with the unsharded linear (ops::linear_*), and
// the number of all-reduces each one issues is counted from the trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/model/param.h"
#include "core/ops/ops.h"
#include "core/parallel/tensor_parallel.h"
#include "core/runtime/world.h"
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

Full unsharded(const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& dy, int64_t in, int64_t out) {
  Full f;
  World one(grade::local_world(1));
  one.run([&](RankContext&) {
    Tensor X = Tensor::from({B, T, in}, x), W = Tensor::from({out, in}, w),
           Bi = Tensor::from({out}, b), DY = Tensor::from({B, T, out}, dy);
    Tensor Y = Tensor::zeros({B, T, out}, MemCategory::activations);
    Tensor DX = Tensor::zeros({B, T, in}, MemCategory::workspace);
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
    Tensor Y = Tensor::zeros({B, T, out}, MemCategory::activations);
    (column ? seams.column_forward : seams.row_forward)(Y, X, W, Bi, group);
    mine.y = Y.to_vector();
    if (!backward) return;
    Tensor DY = Tensor::from({B, T, out}, column ? columns(dy, OUT, s0, s1) : dy);
    Tensor DX = Tensor::zeros({B, T, in}, MemCategory::workspace);
    Tensor DW = Tensor::zeros(W.shape(), MemCategory::gradients);
    Tensor DB = Tensor::zeros({out}, MemCategory::gradients);
    (column ? seams.column_backward : seams.row_backward)(DX, DW, DB, DY, X, W, group);
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

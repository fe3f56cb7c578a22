// Graded: exercise 06, the column- and row-parallel linear (docs/exercises/06-tensor-parallel.md).
// The installed seam functions run on 1, 2 and 4 rank threads, each rank holding its slice of one
// full linear; outputs and gradients are compared with the unsharded linear (ops::linear_*), and
// the number of all-reduces each one issues is counted from the trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/ops/ops.h"
#include "core/parallel/tensor_parallel.h"
#include "core/runtime/world.h"
#include "grade/grade_support.h"

using namespace mgpu;

namespace {
constexpr int64_t B = 2, T = 3, IN = 8, OUT = 12;

std::vector<float> values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + scale);
  return v;
}

WorldOptions world_of(int ranks) {
  WorldOptions o;
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = 3;
  return o;
}

struct Full {  // the unsharded linear's results
  std::vector<float> y, dx, dw, db;
};

Full unsharded(const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& dy, int64_t in, int64_t out) {
  Full f;
  World one(world_of(1));
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

// Elements [c0, c1) of every row of a row-major [rows, cols] matrix (or [B, T, cols] tensor).
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t c0, int64_t c1) {
  std::vector<float> out;
  for (size_t row = 0; row < m.size() / static_cast<size_t>(cols); ++row)
    for (int64_t c = c0; c < c1; ++c)
      out.push_back(m[row * static_cast<size_t>(cols) + static_cast<size_t>(c)]);
  return out;
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

// Column-parallel: rank r owns output rows [r*OUT/t, (r+1)*OUT/t) of W and b.
void check_column(int tp, bool backward) {
  INFO("tp = " << tp);
  const auto x = values(B * T * IN, 1.0f), w = values(OUT * IN, 0.5f), b = values(OUT, 0.3f),
             dy = values(B * T * OUT, 0.8f);
  const Full want = unsharded(x, w, b, dy, IN, OUT);
  std::vector<RankResult> got(static_cast<size_t>(tp));
  World world(world_of(tp));
  world.run([&](RankContext& ctx) {
    comm::Comm& group = *ctx.comm;
    RankResult& mine = got[static_cast<size_t>(ctx.rank)];
    const int64_t o0 = group.rank() * OUT / tp, o1 = (group.rank() + 1) * OUT / tp;
    mine.begin = o0, mine.end = o1;
    Tensor X = Tensor::from({B, T, IN}, x);
    Tensor W =
        Tensor::from({o1 - o0, IN}, std::vector<float>(w.begin() + o0 * IN, w.begin() + o1 * IN));
    Tensor Bi = Tensor::from({o1 - o0}, std::vector<float>(b.begin() + o0, b.begin() + o1));
    Tensor Y = Tensor::zeros({B, T, o1 - o0}, MemCategory::activations);
    parallel::tp_seams().column_forward(Y, X, W, Bi, group);
    mine.y = Y.to_vector();
    if (!backward) return;
    Tensor DY = Tensor::from({B, T, o1 - o0}, columns(dy, OUT, o0, o1));
    Tensor DX = Tensor::zeros({B, T, IN}, MemCategory::workspace);
    Tensor DW = Tensor::zeros(W.shape(), MemCategory::gradients);
    Tensor DB = Tensor::zeros(Bi.shape(), MemCategory::gradients);
    parallel::tp_seams().column_backward(DX, DW, DB, DY, X, W, group);
    mine.dx = DX.to_vector(), mine.dw = DW.to_vector(), mine.db = DB.to_vector();
  });
  for (const RankResult& r : got) {
    const int64_t o0 = r.begin, o1 = r.end;
    check_close(r.y, columns(want.y, OUT, o0, o1), "y_local: my output columns");
    if (!backward) continue;
    check_close(r.dx, want.dx, "dx: the full input gradient on every rank (f's backward)");
    check_close(r.dw, std::vector<float>(want.dw.begin() + o0 * IN, want.dw.begin() + o1 * IN),
                "dw_local");
    check_close(r.db, std::vector<float>(want.db.begin() + o0, want.db.begin() + o1), "db_local");
  }
  // forward: f is the identity, no communication; backward: one all-reduce (on one rank it may
  // be skipped)
  const int issued = all_reduces_on_rank0(world);
  if (!backward)
    CHECK(issued == 0);
  else if (tp > 1)
    CHECK(issued == 1);
  else
    CHECK(issued <= 1);
}

// Row-parallel: rank r owns input columns [r*IN/t, (r+1)*IN/t) of W; rank 0 adds the bias.
void check_row(int tp, bool backward) {
  INFO("tp = " << tp);
  const auto x = values(B * T * IN, 0.9f), w = values(OUT * IN, 0.6f), b = values(OUT, 0.4f),
             dy = values(B * T * OUT, 0.7f);
  const Full want = unsharded(x, w, b, dy, IN, OUT);
  std::vector<RankResult> got(static_cast<size_t>(tp));
  World world(world_of(tp));
  world.run([&](RankContext& ctx) {
    comm::Comm& group = *ctx.comm;
    RankResult& mine = got[static_cast<size_t>(ctx.rank)];
    const int64_t c0 = group.rank() * IN / tp, c1 = (group.rank() + 1) * IN / tp;
    mine.begin = c0, mine.end = c1;
    Tensor X = Tensor::from({B, T, c1 - c0}, columns(x, IN, c0, c1));
    Tensor W = Tensor::from({OUT, c1 - c0}, columns(w, IN, c0, c1));
    Tensor Bi = group.rank() == 0 ? Tensor::from({OUT}, b) : Tensor();
    Tensor Y = Tensor::zeros({B, T, OUT}, MemCategory::activations);
    parallel::tp_seams().row_forward(Y, X, W, Bi, group);
    mine.y = Y.to_vector();
    if (!backward) return;
    Tensor DY = Tensor::from({B, T, OUT}, dy);
    Tensor DX = Tensor::zeros({B, T, c1 - c0}, MemCategory::workspace);
    Tensor DW = Tensor::zeros(W.shape(), MemCategory::gradients);
    Tensor DB = Tensor::zeros({OUT}, MemCategory::gradients);
    parallel::tp_seams().row_backward(DX, DW, DB, DY, X, W, group);
    mine.dx = DX.to_vector(), mine.dw = DW.to_vector(), mine.db = DB.to_vector();
  });
  for (const RankResult& r : got) {
    const int64_t c0 = r.begin, c1 = r.end;
    check_close(r.y, want.y, "y: the full output on every rank (g's forward, bias once)");
    if (!backward) continue;
    check_close(r.dx, columns(want.dx, IN, c0, c1), "dx_local: my input columns");
    check_close(r.dw, columns(want.dw, IN, c0, c1), "dw_local");
    check_close(r.db, want.db, "db: the whole bias gradient on every rank");
  }
  // forward: one all-reduce (g; on one rank it may be skipped); backward: none (g's backward is
  // the identity)
  const int issued = all_reduces_on_rank0(world);
  if (tp > 1)
    CHECK(issued == 1);
  else
    CHECK(issued <= 1);
}
}  // namespace

TEST_CASE("ex06 column-parallel forward gives each rank its output columns (2 pts)",
          "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_column(tp, false);
}

TEST_CASE("ex06 column-parallel backward all-reduces the input gradient (3 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_column(tp, true);
}

TEST_CASE("ex06 row-parallel forward all-reduces the partial outputs (3 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_row(tp, false);
}

TEST_CASE("ex06 row-parallel backward needs no communication (2 pts)", "[grade][ex06]") {
  for (int tp : {1, 2, 4}) check_row(tp, true);
}

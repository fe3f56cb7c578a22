// Ops that move rows and columns between tensors: copy_columns, and the MoE permutation
// (gather the rows routed to an expert, combine its outputs back, the router's row dots).
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <span>
#include <string>

#include "core/ops/cpu/kernels.h"
#include "core/ops/ops_internal.h"
#include "core/runtime/context.h"

namespace mgpu::ops {

void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t width,
                  bool add) {
  const int64_t rows = row_count(src), dst_cols = last_dim(dst), src_cols = last_dim(src);
  check(row_count(dst) == rows && width >= 0 && dst_col >= 0 && src_col >= 0 &&
            dst_col + width <= dst_cols && src_col + width <= src_cols,
        "copy_columns",
        fmt::format("columns [{}, {}) of {} into [{}, {}) of {}: rows or ranges do not fit",
                    src_col, src_col + width, shape_str(src.shape()), dst_col, dst_col + width,
                    shape_str(dst.shape())));
  KernelScope ks("copy_columns", add ? double(rows * width) : 0.0,
                 elem_bytes(dst) * (add ? 3.0 : 2.0) * double(rows * width), dst.dtype());
  if (!has_math(dst)) return;
  Fp32Staging st;
  run(dst, "copy_columns", cpu::copy_columns, &CudaKernels::copy_columns, st.out(dst), dst_cols,
      dst_col, st.in(src), src_cols, src_col, width, rows, add);
}

namespace {
// A permutation op's shapes: `rows` has one row per index, `table` the rows they point into.
void check_row_index(const char* op, const Tensor& rows, const Tensor& table,
                     std::span<const int32_t> index, std::span<const float> scale) {
  const int64_t n = int64_t(index.size()), table_rows = row_count(table);
  check(row_count(rows) == n && last_dim(rows) == last_dim(table) &&
            (scale.empty() || int64_t(scale.size()) == n),
        op,
        fmt::format("{} indices and {} scales for rows {} of table {}", n, scale.size(),
                    shape_str(rows.shape()), shape_str(table.shape())));
  for (int32_t i : index)
    if (i < 0 || i >= table_rows)
      check(false, op, fmt::format("row index {} is outside [0, {})", i, table_rows));
}
}  // namespace

void gather_rows(Tensor& rows, const Tensor& inp, std::span<const int32_t> index,
                 std::span<const float> scale) {
  check_row_index("gather_rows", rows, inp, index, scale);
  const int64_t n = row_count(rows), c = last_dim(rows);
  KernelScope ks("gather_rows", scale.empty() ? 0.0 : double(n * c),
                 elem_bytes(rows) * 2.0 * double(n * c), rows.dtype());
  if (!has_math(rows)) return;
  Fp32Staging st;
  run(rows, "gather_rows", cpu::gather_rows, &CudaKernels::gather_rows, st.out(rows), st.in(inp),
      index.data(), scale.empty() ? nullptr : scale.data(), n, c);
}

void combine_rows(Tensor& out, const Tensor& rows, std::span<const int32_t> index,
                  std::span<const float> scale) {
  check_row_index("combine_rows", rows, out, index, scale);
  const int64_t n = row_count(rows), c = last_dim(rows);
  KernelScope ks("combine_rows", 2.0 * double(n * c),
                 elem_bytes(out) * double(out.numel() + 2 * n * c), out.dtype());
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "combine_rows", cpu::combine_rows, &CudaKernels::combine_rows, st.out(out),
      row_count(out), st.in(rows), index.data(), scale.empty() ? nullptr : scale.data(), n, c);
}

void gathered_row_dots(std::span<float> dots, const Tensor& a, std::span<const int32_t> index,
                       const Tensor& b) {
  check_row_index("gathered_row_dots", b, a, index, {});
  check(int64_t(dots.size()) == int64_t(index.size()), "gathered_row_dots", "one dot per index");
  const int64_t n = row_count(b), c = last_dim(b);
  KernelScope ks("gathered_row_dots", 2.0 * double(n * c), elem_bytes(b) * 2.0 * double(n * c),
                 b.dtype());
  if (!has_math(b)) return;
  Fp32Staging st;
  run(b, "gathered_row_dots", cpu::gathered_row_dots, &CudaKernels::gathered_row_dots, dots.data(),
      st.in(a), index.data(), st.in(b), n, c);
}

}  // namespace mgpu::ops

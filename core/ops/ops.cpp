// Dispatch: cost accounting, shape checks, then the CPU kernel or the CUDA table. The FLOP and
// byte counts are what the kernel really does (multiply-add = 2 FLOPs, 4 bytes per float read or
// written once); the modeled clock turns them into time with the rank's roofline.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cpu/precision.h"
#include "core/ops/cuda_table.h"
#include "core/ops/ops_internal.h"
#include "core/runtime/context.h"

namespace mgpu {

namespace {
CudaKernels& installed_cuda_kernels() {
  static CudaKernels table;
  return table;
}
}  // namespace

const CudaKernels& cuda_kernels() {
  return installed_cuda_kernels();
}
void install_cuda_kernels(const CudaKernels& kernels) {
  installed_cuda_kernels() = kernels;
}

namespace ops {

namespace detail {

double elem_bytes(const Tensor& t) {
  return static_cast<double>(dtype_size(t.dtype()));
}

void check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

int64_t last_dim(const Tensor& t) {
  return t.ndim() == 0 ? 1 : t.dim(-1);
}
int64_t row_count(const Tensor& t) {
  return t.numel() / std::max<int64_t>(last_dim(t), 1);
}

bool has_math(const Tensor& t) {
  return t.has_data();
}

}  // namespace detail

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float beta) {
  const double kF = elem_bytes(a);
  const DType kT = a.dtype();
  const int64_t a_rows = row_count(a), a_cols = last_dim(a);
  const int64_t b_rows = row_count(b), b_cols = last_dim(b);
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t n = trans_b ? b_rows : b_cols, kb = trans_b ? b_cols : b_rows;
  // The messages are formatted only on failure: matmul is the hottest op of a phantom simulation.
  if (k != kb)
    check(false, "matmul",
          fmt::format("inner dims differ: a {}{} and b {}{}", shape_str(a.shape()),
                      trans_a ? "^T" : "", shape_str(b.shape()), trans_b ? "^T" : ""));
  if (out.numel() != m * n || last_dim(out) != n)
    check(false, "matmul",
          fmt::format("out {} should hold [{}, {}]", shape_str(out.shape()), m, n));
  KernelScope ks("matmul",
                 KernelCost{.kind = KernelKind::gemm,
                            .flops = 2.0 * m * n * k,
                            .bytes = kF * (m * k + k * n + (beta != 0.0f ? 2 : 1) * m * n),
                            .dtype = kT,
                            .m = double(m),
                            .n = double(n),
                            .k = double(k)});
  if (!has_math(out)) return;
  if (out.device().kind == DeviceKind::cuda && kT != DType::f32 && b.dtype() == kT &&
      out.dtype() == kT) {  // cuBLAS reads and writes the 2-byte type itself (fp32 compute)
    cuda_fn(&CudaKernels::matmul_2byte, "matmul")(out.raw(), a.raw(), b.raw(), kT, m, n, k, trans_a,
                                                  trans_b, beta);
    return;
  }
  Fp32Staging st;
  run(out, "matmul", cpu::matmul, &CudaKernels::matmul, st.out(out), st.in(a), st.in(b), m, n, k,
      trans_a, trans_b, beta);
}

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  matmul(out, inp, weight, false, true);
  if (bias.defined()) bias_add(out, bias);
}

void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  matmul(dinp, dout, weight, false, false);                // [N,OC] @ [OC,IC]
  matmul(dweight, dout, inp, true, false, /*beta=*/1.0f);  // [OC,N] @ [N,IC], accumulated
  if (dbias.defined()) bias_grad(dbias, dout);
}

void bias_add(Tensor& out, const Tensor& bias) {
  const double kF = elem_bytes(out);
  const DType kT = out.dtype();
  const int64_t n = row_count(out), c = last_dim(out);
  check(bias.numel() == c, "bias_add", "bias size must equal the last dim of out");
  KernelScope ks("bias_add", double(n * c), kF * (2 * n * c + c), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "bias_add", cpu::bias_add, &CudaKernels::bias_add, st.out(out), st.in(bias), n, c);
}

void bias_grad(Tensor& dbias, const Tensor& dout) {
  const double kF = elem_bytes(dout);
  const DType kT = dout.dtype();
  const int64_t n = row_count(dout), c = last_dim(dout);
  check(dbias.numel() == c, "bias_grad", "dbias size must equal the last dim of dout");
  KernelScope ks("bias_grad", double(n * c), kF * (n * c + 2 * c), kT);
  if (!has_math(dout)) return;
  Fp32Staging st;
  run(dout, "bias_grad", cpu::bias_grad, &CudaKernels::bias_grad, st.out(dbias), st.in(dout), n, c);
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  const double kF = elem_bytes(out);
  const DType kT = out.dtype();
  check(a.numel() == b.numel() && out.numel() == a.numel(), "add", "sizes differ");
  KernelScope ks("add", double(out.numel()), kF * 3 * out.numel(), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "add", cpu::add, &CudaKernels::add, st.out(out), st.in(a), st.in(b), out.numel());
}

void axpy(Tensor& y, float alpha, const Tensor& x) {
  const double kF = elem_bytes(y);
  const DType kT = y.dtype();
  check(x.numel() == y.numel(), "axpy", "sizes differ");
  KernelScope ks("axpy", 2.0 * y.numel(), kF * 3 * y.numel(), kT);
  if (!has_math(y)) return;
  Fp32Staging st;
  run(y, "axpy", cpu::axpy, &CudaKernels::axpy, st.out(y), alpha, st.in(x), y.numel());
}

void scale(Tensor& x, float alpha) {
  const double kF = elem_bytes(x);
  const DType kT = x.dtype();
  KernelScope ks("scale", double(x.numel()), kF * 2 * x.numel(), kT);
  if (!has_math(x)) return;
  Fp32Staging st;
  run(x, "scale", cpu::scale, &CudaKernels::scale, st.out(x), alpha, x.numel());
}

void convert(Tensor& dst, const Tensor& src) {
  check(dst.numel() == src.numel(), "convert", "sizes differ");
  KernelScope ks("convert", 0.0, elem_bytes(src) * src.numel() + elem_bytes(dst) * dst.numel(),
                 src.dtype());
  if (!has_math(dst)) return;
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src);
    return;
  }
  check(src.device().kind == dst.device().kind, "convert",
        fmt::format("src on {} and dst on {}: convert within one device (copy_from moves bytes)",
                    src.device().str(), dst.device().str()));
  run(dst, "convert", cpu::convert, &CudaKernels::convert, dst.raw(), dst.dtype(), src.raw(),
      src.dtype(), dst.numel());
}

int64_t count_nonfinite(const Tensor& x) {
  KernelScope ks("count_nonfinite", double(x.numel()), elem_bytes(x) * x.numel(), x.dtype());
  if (!has_math(x) || x.numel() == 0) return 0;
  return run(x, "count_nonfinite", cpu::count_nonfinite, &CudaKernels::count_nonfinite, x.raw(),
             x.dtype(), x.numel());
}

}  // namespace ops
}  // namespace mgpu

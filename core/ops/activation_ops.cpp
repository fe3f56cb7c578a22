// The activations and normalisations of a transformer block: GELU, layernorm, softmax (one
// row per token), and a Llama-style block's RMSNorm and SwiGLU. Dispatch as in ops.cpp.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <string>

#include "core/ops/cpu/kernels.h"
#include "core/ops/ops_internal.h"
#include "core/runtime/context.h"

namespace mgpu::ops {

// GELU costs ~10 FLOPs an element forward (cube, tanh, products), ~18 backward.
void gelu_forward(Tensor& out, const Tensor& inp) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  check(out.numel() == inp.numel(), "gelu_forward", "sizes differ");
  KernelScope ks("gelu_forward", 10.0 * inp.numel(), kF * 2 * inp.numel(), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "gelu_forward", cpu::gelu_forward, &CudaKernels::gelu_forward, st.out(out), st.in(inp),
      inp.numel());
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  check(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward",
        "sizes differ");
  KernelScope ks("gelu_backward", 18.0 * inp.numel(), kF * 3 * inp.numel(), kT);
  if (!has_math(dinp)) return;
  Fp32Staging st;
  run(dinp, "gelu_backward", cpu::gelu_backward, &CudaKernels::gelu_backward, st.out(dinp),
      st.in(inp), st.in(dout), inp.numel());
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(out.numel() == inp.numel() && mean.numel() == n && rstd.numel() == n &&
            weight.numel() == c && bias.numel() == c,
        "layernorm_forward",
        fmt::format("inp {} needs out of the same size, mean/rstd [{}], weight/bias [{}]",
                    shape_str(inp.shape()), n, c));
  KernelScope ks("layernorm_forward", 8.0 * n * c, kF * (2 * n * c + 2 * c + 2 * n), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "layernorm_forward", cpu::layernorm_forward, &CudaKernels::layernorm_forward,
      st.out(out), st.out(mean), st.out(rstd), st.in(inp), st.in(weight), st.in(bias), n, c);
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == c &&
            dbias.numel() == c,
        "layernorm_backward", "gradient sizes must match inp and weight");
  KernelScope ks("layernorm_backward", 14.0 * n * c, kF * (3 * n * c + 4 * c + 2 * n), kT);
  if (!has_math(dinp)) return;
  Fp32Staging st;
  run(dinp, "layernorm_backward", cpu::layernorm_backward, &CudaKernels::layernorm_backward,
      st.out(dinp), st.out(dweight), st.out(dbias), st.in(dout), st.in(inp), st.in(weight),
      st.in(mean), st.in(rstd), n, c);
}

void softmax_forward(Tensor& out, const Tensor& inp) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(out.numel() == inp.numel(), "softmax_forward", "sizes differ");
  KernelScope ks("softmax_forward", 5.0 * n * c, kF * 2 * n * c, kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "softmax_forward", cpu::softmax_forward, &CudaKernels::softmax_forward, st.out(out),
      st.in(inp), n, c);
}

void softmax_backward(Tensor& dinp, const Tensor& out, const Tensor& dout) {
  const double kF = elem_bytes(out);
  const DType kT = out.dtype();
  const int64_t n = row_count(out), c = last_dim(out);
  check(dinp.numel() == out.numel() && dout.numel() == out.numel(), "softmax_backward",
        "sizes differ");
  KernelScope ks("softmax_backward", 4.0 * n * c, kF * 3 * n * c, kT);
  if (!has_math(dinp)) return;
  Fp32Staging st;
  run(dinp, "softmax_backward", cpu::softmax_backward, &CudaKernels::softmax_backward, st.out(dinp),
      st.in(out), st.in(dout), n, c);
}

// RMSNorm: per element a square and an add (the mean square), two products (x * rstd * w).
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(out.numel() == inp.numel() && rstd.numel() == n && weight.numel() == c, "rmsnorm_forward",
        fmt::format("inp {} needs out of the same size, rstd [{}], weight [{}]",
                    shape_str(inp.shape()), n, c));
  KernelScope ks("rmsnorm_forward", 4.0 * n * c, kF * (2 * n * c + c + n), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "rmsnorm_forward", cpu::rmsnorm_forward, &CudaKernels::rmsnorm_forward, st.out(out),
      st.out(rstd), st.in(inp), st.in(weight), n, c);
}

// Per element: xhat, g, their product and sum (the row term), dx's three operations, dw's two.
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const double kF = elem_bytes(inp);
  const DType kT = inp.dtype();
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && weight.numel() == c &&
            dweight.numel() == c && rstd.numel() == n,
        "rmsnorm_backward",
        fmt::format("inp {} needs dinp and dout of the same size, weight/dweight [{}], rstd [{}]",
                    shape_str(inp.shape()), c, n));
  KernelScope ks("rmsnorm_backward", 10.0 * n * c, kF * (3 * n * c + 3 * c + n), kT);
  if (!has_math(dinp)) return;
  Fp32Staging st;
  run(dinp, "rmsnorm_backward", cpu::rmsnorm_backward, &CudaKernels::rmsnorm_backward, st.out(dinp),
      st.out(dweight), st.in(dout), st.in(inp), st.in(weight), st.in(rstd), n, c);
}

namespace {
// SwiGLU's shapes: gate_up [N, 2F] and the [N, F] tensor beside it (out, dout). Returns F.
int64_t swiglu_width(const char* op, const Tensor& gate_up, const Tensor& half) {
  const int64_t f = last_dim(half);
  check(gate_up.ndim() >= 1 && half.ndim() >= 1 && row_count(gate_up) == row_count(half) &&
            last_dim(gate_up) == 2 * f,
        op,
        fmt::format("gate_up must be [N, 2F] beside [N, F], got {} and {}",
                    shape_str(gate_up.shape()), shape_str(half.shape())));
  return f;
}
}  // namespace

// SwiGLU, ~8 FLOPs an output element: e^-gate (~4), an add and a division (silu), the product
// with up. Reads 2F and writes F per row.
void swiglu_forward(Tensor& out, const Tensor& gate_up) {
  const int64_t f = swiglu_width("swiglu_forward", gate_up, out), n = row_count(out);
  KernelScope ks("swiglu_forward", 8.0 * n * f, elem_bytes(gate_up) * 3.0 * n * f, gate_up.dtype());
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "swiglu_forward", cpu::swiglu_forward, &CudaKernels::swiglu_forward, st.out(out),
      st.in(gate_up), n, f);
}

// ~20 FLOPs an output element: sigmoid and silu (an exp each), silu's derivative, two
// gradients. Reads gate, up and dout, writes dgate and dup.
void swiglu_backward(Tensor& dgate_up, const Tensor& gate_up, const Tensor& dout) {
  const int64_t f = swiglu_width("swiglu_backward", gate_up, dout), n = row_count(dout);
  check(dgate_up.numel() == gate_up.numel(), "swiglu_backward",
        fmt::format("dgate_up must match gate_up {}", shape_str(gate_up.shape())));
  KernelScope ks("swiglu_backward", 20.0 * n * f, elem_bytes(gate_up) * 5.0 * n * f,
                 gate_up.dtype());
  if (!has_math(dgate_up)) return;
  Fp32Staging st;
  run(dgate_up, "swiglu_backward", cpu::swiglu_backward, &CudaKernels::swiglu_backward,
      st.out(dgate_up), st.in(gate_up), st.in(dout), n, f);
}

}  // namespace mgpu::ops

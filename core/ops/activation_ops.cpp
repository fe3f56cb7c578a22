// The activations and normalisations of a transformer block: GELU, layernorm, softmax (one
// row per token). Dispatch as in ops.cpp.
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

}  // namespace mgpu::ops

// Dispatch: cost accounting, shape checks, then the CPU kernel or the CUDA table. The FLOP and
// byte counts are what the kernel really does (multiply-add = 2 FLOPs, 4 bytes per float read or
// written once); the modeled clock turns them into time with the rank's roofline.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <stdexcept>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cuda_table.h"
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

namespace {

constexpr double kF = 4.0;  // bytes per f32

void check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

int64_t last_dim(const Tensor& t) {
  return t.ndim() == 0 ? 1 : t.dim(-1);
}
int64_t row_count(const Tensor& t) {
  return t.numel() / std::max<int64_t>(last_dim(t), 1);
}

// The CUDA kernel for `op`, or a clear error when none is installed yet.
template <class Fn>
Fn cuda_fn(Fn CudaKernels::*entry, const char* op) {
  Fn fn = cuda_kernels().*entry;
  if (!fn)
    throw std::runtime_error(fmt::format(
        "{}: this op has no CUDA kernel yet (run on --device cpu or phantom, or add one in "
        "core/ops/cuda/ and install it with install_cuda_kernels)",
        op));
  return fn;
}

// Runs the CPU kernel or the CUDA one with the same arguments. Phantom is handled by callers
// (they return right after their KernelScope).
template <class Fn, class... Args>
auto run(const Tensor& t, const char* op, Fn cpu_kernel, Fn CudaKernels::*cuda_entry,
         Args&&... args) {
  if (t.device().kind == DeviceKind::cuda)
    return cuda_fn(cuda_entry, op)(std::forward<Args>(args)...);
  return cpu_kernel(std::forward<Args>(args)...);
}

// True when there is math to do (not phantom).
bool has_math(const Tensor& t) {
  return t.has_data();
}

}  // namespace

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float beta) {
  const int64_t a_rows = row_count(a), a_cols = last_dim(a);
  const int64_t b_rows = row_count(b), b_cols = last_dim(b);
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t n = trans_b ? b_rows : b_cols, kb = trans_b ? b_cols : b_rows;
  check(k == kb, "matmul",
        fmt::format("inner dims differ: a {}{} and b {}{}", shape_str(a.shape()),
                    trans_a ? "^T" : "", shape_str(b.shape()), trans_b ? "^T" : ""));
  check(out.numel() == m * n && last_dim(out) == n, "matmul",
        fmt::format("out {} should hold [{}, {}]", shape_str(out.shape()), m, n));
  KernelScope ks("matmul", 2.0 * m * n * k, kF * (m * k + k * n + (beta != 0.0f ? 2 : 1) * m * n));
  if (!has_math(out)) return;
  run(out, "matmul", cpu::matmul, &CudaKernels::matmul, out.f32(), a.f32(), b.f32(), m, n, k,
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
  const int64_t n = row_count(out), c = last_dim(out);
  check(bias.numel() == c, "bias_add", "bias size must equal the last dim of out");
  KernelScope ks("bias_add", double(n * c), kF * (2 * n * c + c));
  if (!has_math(out)) return;
  run(out, "bias_add", cpu::bias_add, &CudaKernels::bias_add, out.f32(), bias.f32(), n, c);
}

void bias_grad(Tensor& dbias, const Tensor& dout) {
  const int64_t n = row_count(dout), c = last_dim(dout);
  check(dbias.numel() == c, "bias_grad", "dbias size must equal the last dim of dout");
  KernelScope ks("bias_grad", double(n * c), kF * (n * c + 2 * c));
  if (!has_math(dout)) return;
  run(dout, "bias_grad", cpu::bias_grad, &CudaKernels::bias_grad, dbias.f32(), dout.f32(), n, c);
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  check(a.numel() == b.numel() && out.numel() == a.numel(), "add", "sizes differ");
  KernelScope ks("add", double(out.numel()), kF * 3 * out.numel());
  if (!has_math(out)) return;
  run(out, "add", cpu::add, &CudaKernels::add, out.f32(), a.f32(), b.f32(), out.numel());
}

void axpy(Tensor& y, float alpha, const Tensor& x) {
  check(x.numel() == y.numel(), "axpy", "sizes differ");
  KernelScope ks("axpy", 2.0 * y.numel(), kF * 3 * y.numel());
  if (!has_math(y)) return;
  run(y, "axpy", cpu::axpy, &CudaKernels::axpy, y.f32(), alpha, x.f32(), y.numel());
}

void scale(Tensor& x, float alpha) {
  KernelScope ks("scale", double(x.numel()), kF * 2 * x.numel());
  if (!has_math(x)) return;
  run(x, "scale", cpu::scale, &CudaKernels::scale, x.f32(), alpha, x.numel());
}

// GELU costs ~10 FLOPs an element forward (cube, tanh, products), ~18 backward.
void gelu_forward(Tensor& out, const Tensor& inp) {
  check(out.numel() == inp.numel(), "gelu_forward", "sizes differ");
  KernelScope ks("gelu_forward", 10.0 * inp.numel(), kF * 2 * inp.numel());
  if (!has_math(out)) return;
  run(out, "gelu_forward", cpu::gelu_forward, &CudaKernels::gelu_forward, out.f32(), inp.f32(),
      inp.numel());
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward",
        "sizes differ");
  KernelScope ks("gelu_backward", 18.0 * inp.numel(), kF * 3 * inp.numel());
  if (!has_math(dinp)) return;
  run(dinp, "gelu_backward", cpu::gelu_backward, &CudaKernels::gelu_backward, dinp.f32(), inp.f32(),
      dout.f32(), inp.numel());
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(out.numel() == inp.numel() && mean.numel() == n && rstd.numel() == n &&
            weight.numel() == c && bias.numel() == c,
        "layernorm_forward",
        fmt::format("inp {} needs out of the same size, mean/rstd [{}], weight/bias [{}]",
                    shape_str(inp.shape()), n, c));
  KernelScope ks("layernorm_forward", 8.0 * n * c, kF * (2 * n * c + 2 * c + 2 * n));
  if (!has_math(out)) return;
  run(out, "layernorm_forward", cpu::layernorm_forward, &CudaKernels::layernorm_forward, out.f32(),
      mean.f32(), rstd.f32(), inp.f32(), weight.f32(), bias.f32(), n, c);
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == c &&
            dbias.numel() == c,
        "layernorm_backward", "gradient sizes must match inp and weight");
  KernelScope ks("layernorm_backward", 14.0 * n * c, kF * (3 * n * c + 4 * c + 2 * n));
  if (!has_math(dinp)) return;
  run(dinp, "layernorm_backward", cpu::layernorm_backward, &CudaKernels::layernorm_backward,
      dinp.f32(), dweight.f32(), dbias.f32(), dout.f32(), inp.f32(), weight.f32(), mean.f32(),
      rstd.f32(), n, c);
}

void softmax_forward(Tensor& out, const Tensor& inp) {
  const int64_t n = row_count(inp), c = last_dim(inp);
  check(out.numel() == inp.numel(), "softmax_forward", "sizes differ");
  KernelScope ks("softmax_forward", 5.0 * n * c, kF * 2 * n * c);
  if (!has_math(out)) return;
  run(out, "softmax_forward", cpu::softmax_forward, &CudaKernels::softmax_forward, out.f32(),
      inp.f32(), n, c);
}

void softmax_backward(Tensor& dinp, const Tensor& out, const Tensor& dout) {
  const int64_t n = row_count(out), c = last_dim(out);
  check(dinp.numel() == out.numel() && dout.numel() == out.numel(), "softmax_backward",
        "sizes differ");
  KernelScope ks("softmax_backward", 4.0 * n * c, kF * 3 * n * c);
  if (!has_math(dinp)) return;
  run(dinp, "softmax_backward", cpu::softmax_backward, &CudaKernels::softmax_backward, dinp.f32(),
      out.f32(), dout.f32(), n, c);
}

namespace {
struct AttentionDims {
  int64_t b, t, c, heads;
  // (query, key) pairs the kernels compute: heads * B * T * T. The CPU kernels run the scores
  // as full T x T GEMMs and then mask, so we count the masked half too.
  double pairs() const { return double(b) * heads * t * t; }
};
AttentionDims attention_dims(const char* op, const Tensor& qkv, const Tensor& att, int heads) {
  check(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0, op,
        fmt::format("qkv must be [B, T, 3C], got {}", shape_str(qkv.shape())));
  AttentionDims d{qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, heads};
  check(heads > 0 && d.c % heads == 0, op,
        fmt::format("heads ({}) must divide C ({})", heads, d.c));
  check(att.numel() == d.b * heads * d.t * d.t, op,
        fmt::format("att must be [B, H, T, T] = [{}, {}, {}, {}]", d.b, heads, d.t, d.t));
  return d;
}
}  // namespace

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int heads) {
  const AttentionDims d = attention_dims("attention_forward", qkv, att, heads);
  check(out.numel() == d.b * d.t * d.c, "attention_forward", "out must be [B, T, C]");
  const double hs = double(d.c / heads);
  // per pair: q.k (2 hs), softmax (~5), att * v (2 hs)
  KernelScope ks("attention_forward", d.pairs() * (4.0 * hs + 5.0),
                 kF * (d.b * d.t * 4.0 * d.c + double(att.numel())));
  if (!has_math(out)) return;
  run(out, "attention_forward", cpu::attention_forward, &CudaKernels::attention_forward, out.f32(),
      att.f32(), qkv.f32(), d.b, d.t, d.c, d.heads);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads) {
  const AttentionDims d = attention_dims("attention_backward", qkv, att, heads);
  check(dqkv.numel() == qkv.numel() && dout.numel() == d.b * d.t * d.c, "attention_backward",
        "dqkv must match qkv and dout must be [B, T, C]");
  const double hs = double(d.c / heads);
  // per pair: dP (2 hs), dV (2 hs), softmax backward (~4), dQ and dK (4 hs)
  KernelScope ks("attention_backward", d.pairs() * (8.0 * hs + 4.0),
                 kF * (d.b * d.t * 7.0 * d.c + double(att.numel())));
  if (!has_math(dqkv)) return;
  run(dqkv, "attention_backward", cpu::attention_backward, &CudaKernels::attention_backward,
      dqkv.f32(), dout.f32(), qkv.f32(), att.f32(), d.b, d.t, d.c, d.heads);
}

namespace {
void check_ids(const char* op, std::span<const int32_t> ids, int64_t vocab) {
  for (int32_t id : ids)
    check(id >= 0 && id < vocab, op,
          fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
}
}  // namespace

void embedding_forward(Tensor& out, std::span<const int32_t> tokens, const Tensor& wte,
                       const Tensor& wpe) {
  check(out.ndim() == 3, "embedding_forward", "out must be [B, T, C]");
  const int64_t b = out.dim(0), t = out.dim(1), c = out.dim(2);
  check(int64_t(tokens.size()) == b * t, "embedding_forward",
        fmt::format("{} token ids given for B*T = {}", tokens.size(), b * t));
  check(last_dim(wte) == c && last_dim(wpe) == c && row_count(wpe) >= t, "embedding_forward",
        fmt::format("wte/wpe must be [*, {}] and wpe must have at least T = {} rows", c, t));
  check_ids("embedding_forward", tokens, row_count(wte));
  KernelScope ks("embedding_forward", double(b * t * c), kF * (3.0 * b * t * c + b * t));
  if (!has_math(out)) return;
  run(out, "embedding_forward", cpu::embedding_forward, &CudaKernels::embedding_forward, out.f32(),
      tokens.data(), wte.f32(), wpe.f32(), b, t, c);
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                        std::span<const int32_t> tokens) {
  check(dout.ndim() == 3, "embedding_backward", "dout must be [B, T, C]");
  const int64_t b = dout.dim(0), t = dout.dim(1), c = dout.dim(2);
  check(int64_t(tokens.size()) == b * t, "embedding_backward", "need B*T token ids");
  check_ids("embedding_backward", tokens, row_count(dwte));
  KernelScope ks("embedding_backward", 2.0 * b * t * c, kF * (5.0 * b * t * c + b * t));
  if (!has_math(dout)) return;
  run(dout, "embedding_backward", cpu::embedding_backward, &CudaKernels::embedding_backward,
      dwte.f32(), dwpe.f32(), dout.f32(), tokens.data(), b, t, c);
}

float cross_entropy_forward_backward(Tensor& dlogits, const Tensor& logits,
                                     std::span<const int32_t> targets, float grad_scale) {
  const int64_t n = row_count(logits), v = last_dim(logits);
  check(dlogits.numel() == logits.numel(), "cross_entropy", "dlogits must match logits");
  check(int64_t(targets.size()) == n, "cross_entropy",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  check_ids("cross_entropy", targets, v);
  KernelScope ks("cross_entropy", 7.0 * n * v, kF * (2.0 * n * v + n));
  if (!has_math(logits)) return 0.0f;
  return run(logits, "cross_entropy", cpu::cross_entropy_forward_backward,
             &CudaKernels::cross_entropy_forward_backward, dlogits.f32(), logits.f32(),
             targets.data(), n, v, grad_scale);
}

float cross_entropy_loss(const Tensor& logits, std::span<const int32_t> targets) {
  const int64_t n = row_count(logits), v = last_dim(logits);
  check(int64_t(targets.size()) == n, "cross_entropy_loss",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  check_ids("cross_entropy_loss", targets, v);
  KernelScope ks("cross_entropy_loss", 4.0 * n * v, kF * (double(n * v) + n));
  if (!has_math(logits)) return 0.0f;
  return run(logits, "cross_entropy_loss", cpu::cross_entropy_loss,
             &CudaKernels::cross_entropy_loss, logits.f32(), targets.data(), n, v);
}

}  // namespace ops
}  // namespace mgpu

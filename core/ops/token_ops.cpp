// Ops indexed by token id: the embedding lookup and its scatter-add, and the cross-entropy losses
// (whole-vocabulary and vocabulary-parallel). Every id is checked against the vocabulary first.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <span>
#include <string>

#include "core/ops/cpu/kernels.h"
#include "core/ops/ops_internal.h"
#include "core/runtime/context.h"

namespace mgpu::ops {

namespace {
void check_ids(const char* op, std::span<const int32_t> ids, int64_t vocab) {
  for (int32_t id : ids)  // the message is formatted only for a bad id (this runs per token)
    if (id < 0 || id >= vocab)
      check(false, op, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
}
}  // namespace

void embedding_forward(Tensor& out, std::span<const int32_t> tokens, const Tensor& wte,
                       const Tensor& wpe) {
  const double kF = elem_bytes(out);
  const DType kT = out.dtype();
  check(out.ndim() == 3, "embedding_forward", "out must be [B, T, C]");
  const int64_t b = out.dim(0), t = out.dim(1), c = out.dim(2);
  check(int64_t(tokens.size()) == b * t, "embedding_forward",
        fmt::format("{} token ids given for B*T = {}", tokens.size(), b * t));
  const bool positions = wpe.defined();  // undefined: rotary positions, no table to add
  check(last_dim(wte) == c && (!positions || (last_dim(wpe) == c && row_count(wpe) >= t)),
        "embedding_forward",
        fmt::format("wte/wpe must be [*, {}] and wpe must have at least T = {} rows", c, t));
  check_ids("embedding_forward", tokens, row_count(wte));
  KernelScope ks("embedding_forward", double(b * t * c), kF * (3.0 * b * t * c + b * t), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "embedding_forward", cpu::embedding_forward, &CudaKernels::embedding_forward,
      st.out(out), tokens.data(), st.in(wte), positions ? st.in(wpe) : nullptr, b, t, c);
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout,
                        std::span<const int32_t> tokens) {
  const double kF = elem_bytes(dout);
  const DType kT = dout.dtype();
  check(dout.ndim() == 3, "embedding_backward", "dout must be [B, T, C]");
  const int64_t b = dout.dim(0), t = dout.dim(1), c = dout.dim(2);
  check(int64_t(tokens.size()) == b * t, "embedding_backward", "need B*T token ids");
  check_ids("embedding_backward", tokens, row_count(dwte));
  KernelScope ks("embedding_backward", 2.0 * b * t * c, kF * (5.0 * b * t * c + b * t), kT);
  if (!has_math(dout)) return;
  Fp32Staging st;
  run(dout, "embedding_backward", cpu::embedding_backward, &CudaKernels::embedding_backward,
      st.out(dwte), dwpe.defined() ? st.out(dwpe) : nullptr, st.in(dout), tokens.data(), b, t, c);
}

float cross_entropy_forward_backward(Tensor& dlogits, const Tensor& logits,
                                     std::span<const int32_t> targets, float grad_scale) {
  const double kF = elem_bytes(logits);
  const DType kT = logits.dtype();
  const int64_t n = row_count(logits), v = last_dim(logits);
  check(dlogits.numel() == logits.numel(), "cross_entropy", "dlogits must match logits");
  check(int64_t(targets.size()) == n, "cross_entropy",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  check_ids("cross_entropy", targets, v);
  KernelScope ks("cross_entropy", 7.0 * n * v, kF * (2.0 * n * v + n), kT);
  if (!has_math(logits)) return 0.0f;
  Fp32Staging st;
  return run(logits, "cross_entropy", cpu::cross_entropy_forward_backward,
             &CudaKernels::cross_entropy_forward_backward, st.out(dlogits), st.in(logits),
             targets.data(), n, v, grad_scale);
}

float cross_entropy_loss(const Tensor& logits, std::span<const int32_t> targets) {
  const double kF = elem_bytes(logits);
  const DType kT = logits.dtype();
  const int64_t n = row_count(logits), v = last_dim(logits);
  check(int64_t(targets.size()) == n, "cross_entropy_loss",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  check_ids("cross_entropy_loss", targets, v);
  KernelScope ks("cross_entropy_loss", 4.0 * n * v, kF * (double(n * v) + n), kT);
  if (!has_math(logits)) return 0.0f;
  Fp32Staging st;
  return run(logits, "cross_entropy_loss", cpu::cross_entropy_loss,
             &CudaKernels::cross_entropy_loss, st.in(logits), targets.data(), n, v);
}

void vocab_parallel_ce_stats(Tensor& stats, const Tensor& logits, std::span<const int32_t> targets,
                             int64_t vocab_begin) {
  const int64_t n = row_count(logits), v = last_dim(logits);
  check(stats.dtype() == DType::f32 && stats.numel() == 3 * n, "vocab_parallel_ce_stats",
        fmt::format("stats must be f32 [3, {}] for {} rows of logits", n, n));
  check(int64_t(targets.size()) == n, "vocab_parallel_ce_stats",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  // per element: a max, a subtraction, an exp, an add; logits read once, 3 floats per row out
  KernelScope ks("vocab_parallel_ce_stats", 4.0 * n * v,
                 elem_bytes(logits) * double(n * v) + 12.0 * n + 4.0 * n, logits.dtype());
  if (!has_math(logits)) return;
  Fp32Staging st;
  run(logits, "vocab_parallel_ce_stats", cpu::vocab_parallel_ce_stats,
      &CudaKernels::vocab_parallel_ce_stats, st.out(stats), st.in(logits), targets.data(), n, v,
      vocab_begin);
}

float vocab_parallel_ce_forward_backward(Tensor& dlogits, const Tensor& logits,
                                         const Tensor& all_stats, std::span<const int32_t> targets,
                                         int64_t vocab_begin, float grad_scale) {
  const int64_t n = row_count(logits), v = last_dim(logits);
  const int64_t parts = n == 0 ? 0 : all_stats.numel() / (3 * n);
  check(dlogits.numel() == logits.numel(), "vocab_parallel_ce", "dlogits must match logits");
  check(all_stats.dtype() == DType::f32 && parts >= 1 && all_stats.numel() == parts * 3 * n,
        "vocab_parallel_ce",
        fmt::format("all_stats must be f32 [parts, 3, {}], got {} values", n, all_stats.numel()));
  check(int64_t(targets.size()) == n, "vocab_parallel_ce",
        fmt::format("{} targets given for {} rows of logits", targets.size(), n));
  // per element: exp, subtract, scale; logits read, dlogits written; the stats read once per row
  KernelScope ks("vocab_parallel_ce", 4.0 * n * v + 6.0 * n * parts,
                 elem_bytes(logits) * 2.0 * double(n * v) + 12.0 * n * parts + 4.0 * n,
                 logits.dtype());
  if (!has_math(logits)) return 0.0f;
  Fp32Staging st;
  return run(logits, "vocab_parallel_ce", cpu::vocab_parallel_ce_forward_backward,
             &CudaKernels::vocab_parallel_ce_forward_backward, st.out(dlogits), st.in(logits),
             st.in(all_stats), targets.data(), n, v, vocab_begin, parts, grad_scale);
}

}  // namespace mgpu::ops

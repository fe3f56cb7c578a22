// Dispatch: cost accounting, shape checks, then the CPU kernel or the CUDA table. The FLOP and
// byte counts are what the kernel really does (multiply-add = 2 FLOPs, 4 bytes per float read or
// written once); the modeled clock turns them into time with the rank's roofline.
#include "core/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cpu/precision.h"
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

// Bytes per element of the op's main tensor: the modeled clock charges memory traffic by size.
double elem_bytes(const Tensor& t) {
  return static_cast<double>(dtype_size(t.dtype()));
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

// Mixed precision: the kernels compute in fp32. A 2-byte tensor is widened into an fp32 copy
// before the kernel and, when the kernel writes it, rounded back afterwards, so every store rounds
// exactly once: what a GPU kernel does when it loads bf16, computes in fp32 registers and stores
// bf16. On the CPU the copy is host memory; on cuda it is a device buffer from the device memory
// hooks, filled and emptied by the table's convert kernel (the same rounding code,
// core/ops/math/cast.h). Either way it is outside the allocator: in a fused 2-byte kernel it would
// be registers, not part of the model's memory. fp32 tensors pass straight through.
class Fp32Staging {
 public:
  Fp32Staging() : exceptions_(std::uncaught_exceptions()) {}
  Fp32Staging(const Fp32Staging&) = delete;
  Fp32Staging& operator=(const Fp32Staging&) = delete;
  float* in(const Tensor& t) { return stage(t, false); }
  float* out(Tensor& t) { return stage(t, true); }  // loaded too: some kernels accumulate
  // Rounds the written copies back. An op that threw stores nothing (and must not throw twice).
  ~Fp32Staging() noexcept(false) {
    if (std::uncaught_exceptions() > exceptions_) return;
    for (Staged& s : staged_)
      if (s.written) store_back(s);
  }

 private:
  struct DeviceRelease {
    int device;
    void operator()(void* p) const { device_memory_hooks(DeviceKind::cuda).release(p, device); }
  };
  struct Staged {
    Tensor tensor;
    float* values;
    bool written;
    std::vector<float> host;                             // --device cpu
    std::unique_ptr<void, DeviceRelease> device_copy{};  // --device cuda
  };

  float* stage(const Tensor& t, bool written) {
    if (t.dtype() == DType::f32) return const_cast<float*>(t.f32());
    for (Staged& s : staged_)  // the same tensor passed twice (in place): one buffer, as in fp32
      if (s.tensor.same_view(t)) {
        s.written = s.written || written;
        return s.values;
      }
    Staged& s = staged_.emplace_back(Staged{t, nullptr, written});
    if (t.device().kind == DeviceKind::cuda) {
      const int device = t.device().index;
      if (t.numel() > 0)
        s.device_copy = {device_memory_hooks(DeviceKind::cuda)
                             .allocate(t.numel() * int64_t{sizeof(float)}, device),
                         DeviceRelease{device}};
      s.values = static_cast<float*>(s.device_copy.get());
      cuda_fn(&CudaKernels::convert, "bf16/fp16 staging")(s.values, DType::f32, t.raw(), t.dtype(),
                                                          t.numel());
      return s.values;
    }
    s.host.resize(size_t(t.numel()));
    s.values = s.host.data();
    t.read_f32(s.values, t.numel());
    return s.values;
  }
  static void store_back(Staged& s) {
    if (s.tensor.device().kind == DeviceKind::cuda)
      cuda_fn(&CudaKernels::convert, "bf16/fp16 staging")(s.tensor.raw(), s.tensor.dtype(),
                                                          s.values, DType::f32, s.tensor.numel());
    else
      s.tensor.write_f32(s.values, s.tensor.numel());
  }

  std::deque<Staged> staged_;  // a deque: earlier buffers keep their address
  int exceptions_;
};

void check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

int64_t last_dim(const Tensor& t) {
  return t.ndim() == 0 ? 1 : t.dim(-1);
}
int64_t row_count(const Tensor& t) {
  return t.numel() / std::max<int64_t>(last_dim(t), 1);
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

namespace {
struct AttentionDims {
  int64_t b, t, c, heads;
  // (query, key) pairs the kernels compute: heads * B * T * T. The CPU kernels run the scores
  // as full T x T GEMMs and then mask, so we count the masked half too.
  double pairs() const { return double(b) * heads * t * t; }
  // Priced as batch x heads GEMMs of [T, hs] x [hs, T] plus `passes` over the scores.
  KernelCost cost(double bytes, double flops, double score_bytes, int passes, DType dtype) const {
    return {.kind = KernelKind::attention,
            .flops = flops,
            .bytes = bytes,
            .dtype = dtype,
            .m = double(t),
            .n = double(t),
            .k = double(c / heads),
            .batch = double(b * heads),
            .score_bytes = score_bytes,
            .score_passes = passes};
  }
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
  const double kF = elem_bytes(qkv);
  const DType kT = qkv.dtype();
  const AttentionDims d = attention_dims("attention_forward", qkv, att, heads);
  check(out.numel() == d.b * d.t * d.c, "attention_forward", "out must be [B, T, C]");
  const double hs = double(d.c / heads);
  // per pair: q.k (2 hs), softmax (~5), att * v (2 hs). Materialised, the scores make 4 passes
  // through memory: S = QK^T written, read and P written by softmax, P read by P V.
  KernelScope ks("attention_forward",
                 d.cost(kF * (d.b * d.t * 4.0 * d.c + double(att.numel())),
                        d.pairs() * (4.0 * hs + 5.0), kF * double(att.numel()), 4, kT));
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_forward", cpu::attention_forward, &CudaKernels::attention_forward,
      st.out(out), st.out(att), st.in(qkv), d.b, d.t, d.c, d.heads);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int heads) {
  const double kF = elem_bytes(qkv);
  const DType kT = qkv.dtype();
  const AttentionDims d = attention_dims("attention_backward", qkv, att, heads);
  check(dqkv.numel() == qkv.numel() && dout.numel() == d.b * d.t * d.c, "attention_backward",
        "dqkv must match qkv and dout must be [B, T, C]");
  const double hs = double(d.c / heads);
  // per pair: dP (2 hs), dV (2 hs), softmax backward (~4), dQ and dK (4 hs). Materialised, 7
  // passes over the scores: P read by the dV GEMM, dP written, P and dP read and dS written by
  // softmax's backward, dS read by the dQ GEMM and by the dK GEMM.
  KernelScope ks("attention_backward",
                 d.cost(kF * (d.b * d.t * 7.0 * d.c + double(att.numel())),
                        d.pairs() * (8.0 * hs + 4.0), kF * double(att.numel()), 7, kT));
  if (!has_math(dqkv)) return;
  Fp32Staging st;
  run(dqkv, "attention_backward", cpu::attention_backward, &CudaKernels::attention_backward,
      st.out(dqkv), st.in(dout), st.in(qkv), st.in(att), d.b, d.t, d.c, d.heads);
}

// ---- ring attention (context parallelism): one block of keys at a time

namespace {
struct BlockDims {
  int64_t b, tq, tk, c, heads, att_cols;
  double visible_pairs;  // (query, key) pairs the mask lets through, over every batch row and head
  // Priced as batch x heads GEMMs of [Tq, hs] x [hs, Tk] plus `passes` over the visible scores.
  KernelCost cost(double bytes, double flops, double score_bytes, int passes, DType dtype) const {
    return {.kind = KernelKind::attention,
            .flops = flops,
            .bytes = bytes,
            .dtype = dtype,
            .m = double(tq),
            .n = double(tk),
            .k = double(c / heads),
            .batch = double(b * heads),
            .score_bytes = score_bytes,
            .score_passes = passes};
  }
};
BlockDims block_dims(const char* op, const Tensor& q, const Tensor& kv, const Tensor& att,
                     const Tensor& lse, std::span<const int32_t> q_pos,
                     std::span<const int32_t> kv_pos, int heads) {
  // Messages are formatted only on failure: the planner's simulations call this per block.
  if (!(q.ndim() == 3 && kv.ndim() == 3 && kv.dim(0) == q.dim(0) && kv.dim(2) == 2 * q.dim(2)))
    check(false, op,
          fmt::format("q must be [B, Tq, C] and kv [B, Tk, 2C], got {} and {}",
                      shape_str(q.shape()), shape_str(kv.shape())));
  BlockDims d{q.dim(0), q.dim(1), kv.dim(1), q.dim(2), heads, 0, 0};
  if (!(heads > 0 && d.c % heads == 0))
    check(false, op, fmt::format("heads ({}) must divide C ({})", heads, d.c));
  check(int64_t(q_pos.size()) == d.tq && int64_t(kv_pos.size()) == d.tk, op,
        "one position per query and per key");
  check(std::is_sorted(q_pos.begin(), q_pos.end()) && std::is_sorted(kv_pos.begin(), kv_pos.end()),
        op, "positions must be ascending");
  check(lse.numel() == d.b * heads * d.tq && lse.dtype() == DType::f32, op,
        "lse must be f32 [B, H, Tq]");
  check(att.ndim() == 4 && att.numel() == d.b * heads * d.tq * att.dim(3), op,
        "att must be [B, H, Tq, T]");
  d.att_cols = att.dim(3);
  if (!(kv_pos.empty() || (kv_pos.front() >= 0 && kv_pos.back() < d.att_cols)))
    check(false, op, fmt::format("key positions must lie in [0, {})", d.att_cols));
  // Keys at or before each query (both ascending): one merge-like walk, not a search per query.
  double per_row = 0;
  size_t visible = 0;
  for (int32_t p : q_pos) {
    while (visible < kv_pos.size() && kv_pos[visible] <= p) ++visible;
    per_row += double(visible);
  }
  d.visible_pairs = per_row * double(d.b * heads);
  return d;
}
}  // namespace

void attention_block_forward(Tensor& out, Tensor& lse, Tensor& att, const Tensor& q,
                             const Tensor& kv, std::span<const int32_t> q_pos,
                             std::span<const int32_t> kv_pos, int heads) {
  const double kF = elem_bytes(q);
  const BlockDims d = block_dims("attention_block_forward", q, kv, att, lse, q_pos, kv_pos, heads);
  check(out.numel() == q.numel(), "attention_block_forward", "out must be [B, Tq, C]");
  const double hs = double(d.c / heads);
  // per visible pair: q.k (2 hs), softmax (~5), p * v (2 hs); reads q, k, v, writes out and scores
  // Materialised like attention_forward: 4 passes over the block's visible scores.
  KernelScope ks("attention_block_forward",
                 d.cost(kF * (2.0 * double(q.numel()) + double(kv.numel()) + d.visible_pairs),
                        d.visible_pairs * (4.0 * hs + 5.0), kF * d.visible_pairs, 4, q.dtype()));
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_block_forward", cpu::attention_block_forward,
      &CudaKernels::attention_block_forward, st.out(out), st.out(lse), st.out(att), st.in(q),
      st.in(kv), q_pos.data(), kv_pos.data(), d.b, d.tq, d.tk, d.c, d.heads, d.att_cols);
}

void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& out,
                              const Tensor& q, const Tensor& kv, const Tensor& att,
                              const Tensor& lse, std::span<const int32_t> q_pos,
                              std::span<const int32_t> kv_pos, int heads) {
  const double kF = elem_bytes(q);
  const BlockDims d = block_dims("attention_block_backward", q, kv, att, lse, q_pos, kv_pos, heads);
  check(dq.numel() == q.numel() && dkv.numel() == kv.numel() && dout.numel() == q.numel() &&
            out.numel() == q.numel(),
        "attention_block_backward", "dq, dout and out must match q, and dkv must match kv");
  const double hs = double(d.c / heads);
  // per visible pair: dP (2 hs), dV (2 hs), dQ (2 hs), dK (2 hs), the softmax terms (~4)
  // Materialised like attention_backward: 7 passes over the block's visible scores.
  KernelScope ks("attention_block_backward",
                 d.cost(kF * (5.0 * double(q.numel()) + 2.0 * double(kv.numel()) + d.visible_pairs),
                        d.visible_pairs * (8.0 * hs + 4.0), kF * d.visible_pairs, 7, q.dtype()));
  if (!has_math(dq)) return;
  Fp32Staging st;
  run(dq, "attention_block_backward", cpu::attention_block_backward,
      &CudaKernels::attention_block_backward, st.out(dq), st.out(dkv), st.in(dout), st.in(out),
      st.in(q), st.in(kv), st.in(att), st.in(lse), q_pos.data(), kv_pos.data(), d.b, d.tq, d.tk,
      d.c, d.heads, d.att_cols);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  check(out.ndim() == 3 && lse.ndim() == 3 && lse.dim(0) == out.dim(0) &&
            lse.dim(2) == out.dim(1) && lse.dim(1) > 0 && out.dim(2) % lse.dim(1) == 0,
        "attention_merge",
        fmt::format("out must be [B, T, C] and lse [B, H, T] with H dividing C, got {} and {}",
                    shape_str(out.shape()), shape_str(lse.shape())));
  check(block_out.shape() == out.shape() && block_lse.shape() == lse.shape() &&
            lse.dtype() == DType::f32 && block_lse.dtype() == DType::f32,
        "attention_merge", "the block's out and lse must match out and lse (lse in f32)");
  const int64_t b = out.dim(0), t = out.dim(1), c = out.dim(2), heads = lse.dim(1);
  // per (row, head): a max, two exps and a log; per element: two multiply-adds
  KernelScope ks("attention_merge", 4.0 * double(out.numel()) + 8.0 * double(lse.numel()),
                 elem_bytes(out) * 3.0 * double(out.numel()) + 12.0 * double(lse.numel()),
                 out.dtype());
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "attention_merge", cpu::attention_merge, &CudaKernels::attention_merge, st.out(out),
      st.out(lse), st.in(block_out), st.in(block_lse), b, t, c, heads);
}

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
  check(last_dim(wte) == c && last_dim(wpe) == c && row_count(wpe) >= t, "embedding_forward",
        fmt::format("wte/wpe must be [*, {}] and wpe must have at least T = {} rows", c, t));
  check_ids("embedding_forward", tokens, row_count(wte));
  KernelScope ks("embedding_forward", double(b * t * c), kF * (3.0 * b * t * c + b * t), kT);
  if (!has_math(out)) return;
  Fp32Staging st;
  run(out, "embedding_forward", cpu::embedding_forward, &CudaKernels::embedding_forward,
      st.out(out), tokens.data(), st.in(wte), st.in(wpe), b, t, c);
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
      st.out(dwte), st.out(dwpe), st.in(dout), tokens.data(), b, t, c);
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

}  // namespace ops
}  // namespace mgpu

// Linear, LayerNorm, Embedding and Head: each layer's forward and backward are a few op calls
// (core/ops/ops.h); the backward of a layer is its forward read bottom-up.
#include "core/model/layers.h"

#include "core/model/init.h"
#include "core/model/model_tensors.h"
#include "core/ops/ops.h"

namespace mgpu {

// ---------------------------------------------------------------------------------- Linear

Linear::Linear(const std::string& name, int64_t in, int64_t out, float stddev, bool has_bias)
    : weight(Param::declared(name + ".weight", {out, in}, ParamInit::normal(stddev))) {
  if (has_bias) bias = Param::declared(name + ".bias", {out}, ParamInit::constant(0.0f));
}

void Linear::forward(Tensor& out, const Tensor& inp) const {
  ops::linear_forward(out, inp, weight.data, bias.data);
}

void Linear::backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  backward_input(dinp, dout);  // ops::linear_backward's kernels, in its order
  backward_weight(dout, inp);
}

void Linear::backward_input(Tensor& dinp, const Tensor& dout) const {
  ops::matmul(dinp, dout, weight.data);  // [N,OC] @ [OC,IC]
}

void Linear::backward_weight(const Tensor& dout, const Tensor& inp) {
  ops::matmul(weight.grad, dout, inp, /*trans_a=*/true, false, /*beta=*/1.0f);  // accumulated
  if (bias.grad.defined()) ops::bias_grad(bias.grad, dout);
}

void Linear::collect(ParamList& list) {
  list.push_back(&weight);
  if (!bias.name.empty()) list.push_back(&bias);
}

// ---------------------------------------------------------------------------------- activation

void mlp_activation_forward(Tensor& out, const Tensor& fc, MlpKind kind) {
  if (kind == MlpKind::swiglu) return ops::swiglu_forward(out, fc);
  ops::gelu_forward(out, fc);
}

void mlp_activation_backward(Tensor& d_fc, const Tensor& fc, const Tensor& d_out, MlpKind kind) {
  if (kind == MlpKind::swiglu) return ops::swiglu_backward(d_fc, fc, d_out);
  ops::gelu_backward(d_fc, fc, d_out);
}

// ---------------------------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(const std::string& name, int64_t dim, Norm norm)
    : weight(Param::declared(name + ".weight", {dim}, ParamInit::constant(1.0f))),
      rms(norm == Norm::rmsnorm) {
  if (!rms) bias = Param::declared(name + ".bias", {dim}, ParamInit::constant(0.0f));
}

void LayerNorm::forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp) const {
  if (rms) return ops::rmsnorm_forward(out, rstd, inp, weight.data);
  ops::layernorm_forward(out, mean, rstd, inp, weight.data, bias.data);
}

void LayerNorm::backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                         const Tensor& rstd) {
  if (rms) return ops::rmsnorm_backward(dinp, weight.grad, dout, inp, weight.data, rstd);
  ops::layernorm_backward(dinp, weight.grad, bias.grad, dout, inp, weight.data, mean, rstd);
}

// The layernorm kernel computes both gradients at once: each half runs it and discards the other
// part (the weight half is elementwise and cheap, so W recomputes it rather than faking a cost).
void LayerNorm::backward_input(Tensor& dinp, const Tensor& dout, const Tensor& inp,
                               const Tensor& mean, const Tensor& rstd) const {
  Tensor dw = Tensor::zeros(weight.grad.shape(), MemCategory::workspace, weight.grad.dtype());
  if (rms) return ops::rmsnorm_backward(dinp, dw, dout, inp, weight.data, rstd);
  Tensor db = Tensor::zeros(bias.grad.shape(), MemCategory::workspace, bias.grad.dtype());
  ops::layernorm_backward(dinp, dw, db, dout, inp, weight.data, mean, rstd);
}

void LayerNorm::backward_weight(const Tensor& dout, const Tensor& inp, const Tensor& mean,
                                const Tensor& rstd) {
  Tensor dinp = Tensor::zeros(inp.shape(), MemCategory::workspace, inp.dtype());
  if (rms) return ops::rmsnorm_backward(dinp, weight.grad, dout, inp, weight.data, rstd);
  ops::layernorm_backward(dinp, weight.grad, bias.grad, dout, inp, weight.data, mean, rstd);
}

void LayerNorm::collect(ParamList& list) {
  list.push_back(&weight);
  if (!rms) list.push_back(&bias);
}

// ---------------------------------------------------------------------------------- Embedding

Embedding::Embedding(const GPTConfig& cfg)
    : wte(Param::declared("embedding.wte", {cfg.vocab, cfg.dim}, ParamInit::normal(0.02f))) {
  if (!cfg.rope())
    wpe = Param::declared("embedding.wpe", {cfg.seq_len, cfg.dim}, ParamInit::normal(0.02f));
}

namespace {
// Calls fn(local_row, position, rows) for each run of consecutive positions.
template <class Fn>
void for_each_position_run(const std::vector<int32_t>& positions, Fn&& fn) {
  for (size_t i = 0; i < positions.size();) {
    size_t j = i + 1;
    while (j < positions.size() && positions[j] == positions[j - 1] + 1) ++j;
    fn(int64_t(i), int64_t{positions[i]}, int64_t(j - i));
    i = j;
  }
}
}  // namespace

void Embedding::forward(Tensor& out, std::span<const int32_t> tokens) const {
  if (positions.empty() || wpe.name.empty())
    return ops::embedding_forward(out, tokens, wte.data, wpe.data);
  // The rows of wpe at my positions, gathered so the op reads them as rows 0..T-1.
  const int64_t c = wte.data.dim(1);
  Tensor my_wpe = workspace({int64_t(positions.size()), c}, wpe.data.dtype());
  if (my_wpe.has_data())
    for_each_position_run(positions, [&](int64_t row, int64_t pos, int64_t n) {
      my_wpe.flat_range(row * c, (row + n) * c)
          .copy_from(wpe.data.flat_range(pos * c, (pos + n) * c));
    });
  ops::embedding_forward(out, tokens, wte.data, my_wpe);
}

void Embedding::backward(const Tensor& dout, std::span<const int32_t> tokens) {
  if (positions.empty() || wpe.name.empty())
    return ops::embedding_backward(wte.grad, wpe.grad, dout, tokens);
  const int64_t c = wte.data.dim(1);
  Tensor my_dwpe =
      Tensor::zeros({int64_t(positions.size()), c}, MemCategory::workspace, wpe.grad.dtype());
  ops::embedding_backward(wte.grad, my_dwpe, dout, tokens);  // zero-filled, so += is =
  for_each_position_run(positions, [&](int64_t row, int64_t pos, int64_t n) {
    Tensor rows_of_grad = wpe.grad.flat_range(pos * c, (pos + n) * c);
    ops::axpy(rows_of_grad, 1.0f, my_dwpe.flat_range(row * c, (row + n) * c));
  });
}

void Embedding::collect(ParamList& list) {
  list.push_back(&wte);
  if (!wpe.name.empty()) list.push_back(&wpe);
}

// ---------------------------------------------------------------------------------- Head

HeadActivations HeadActivations::allocate(const GPTConfig& cfg, int64_t batch, int64_t seq,
                                          int vocab_parts) {
  HeadActivations a;
  a.ln = activation({batch, seq, cfg.dim}, cfg.dtype);
  if (!cfg.rmsnorm()) a.ln_mean = statistics({batch, seq});  // RMSNorm keeps no mean
  a.ln_rstd = statistics({batch, seq});
  a.logits = activation({batch, seq, cfg.vocab / vocab_parts}, cfg.dtype);
  a.dlogits = activation({batch, seq, cfg.vocab / vocab_parts}, cfg.dtype);
  return a;
}

Head::Head(const GPTConfig& cfg)
    : ln_f("head.ln_f", cfg.dim, cfg.style.norm),
      lm_head("head.lm_head", cfg.dim, cfg.vocab, 0.02f, /*has_bias=*/false) {
  // Tied, a copy of wte where the embedding is elsewhere: seeded as wte (the same name, the same
  // draw), so both copies start equal, and a checkpoint knows it as the one tensor.
  if (cfg.tie_embeddings) lm_head.weight.name = "embedding.wte";
}

float Head::forward_loss(const Tensor& x, std::span<const int32_t> targets, HeadActivations& a,
                         float grad_scale) const {
  a.input = x;
  ln_f.forward(a.ln, a.ln_mean, a.ln_rstd, x);
  ops::linear_forward(a.logits, a.ln, output_weight().data, lm_head.bias.data);
  if (comm) return comm->cross_entropy(a.dlogits, a.logits, targets, grad_scale);
  return ops::cross_entropy_forward_backward(a.dlogits, a.logits, targets, grad_scale);
}

void Head::backward(Tensor& dx, const HeadActivations& a) {
  Tensor d_ln = workspace(a.ln.shape(), a.ln.dtype());
  if (comm) {  // vocabulary-parallel: my rows' weight gradient, the input's summed over ranks
    ops::matmul(output_weight().grad, a.dlogits, a.ln, /*trans_a=*/true, false, /*beta=*/1.0f);
    comm->input_grad(d_ln, a.dlogits, output_weight().data);
  } else {
    ops::linear_backward(d_ln, output_weight().grad, lm_head.bias.grad, a.dlogits, a.ln,
                         output_weight().data);
  }
  ln_f.backward(dx, d_ln, a.input, a.ln_mean, a.ln_rstd);
}

void Head::collect(ParamList& list) {
  ln_f.collect(list);
  if (!tied) lm_head.collect(list);
}

}  // namespace mgpu

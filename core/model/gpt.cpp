// The tiny GPT: each layer's forward and backward are a few op calls (core/ops/ops.h); the
// backward of a layer is its forward read bottom-up.
#include "core/model/gpt.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "core/model/init.h"
#include "core/model/trace_phase.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"

namespace mgpu {

// ---------------------------------------------------------------------------------- config

const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  throw std::invalid_argument("unknown recompute mode '" + text +
                              "' (use none, selective or full)");
}

namespace {
// The divisors of `dim` up to 16, as "1, 2, 4, 8", for the error message.
std::string divisors_of(int dim) {
  std::string s;
  for (int h = 1; h <= std::min(dim, 16); h++)
    if (dim % h == 0) s += (s.empty() ? "" : ", ") + std::to_string(h);
  return s;
}
}  // namespace

void GPTConfig::validate() const {
  auto positive = [](const char* what, int v) {
    if (v <= 0)
      throw std::invalid_argument(
          fmt::format("GPT config: {} ({}) must be positive, e.g. {} 64", what, v, what));
  };
  positive("vocab", vocab);
  positive("seq_len", seq_len);
  positive("layers", layers);
  positive("dim", dim);
  positive("heads", heads);
  if (dim % heads != 0)
    throw std::invalid_argument(fmt::format(
        "GPT config: heads ({}) must divide dim ({}): try heads {}", heads, dim, divisors_of(dim)));
  validate_experts();
}

void GPTConfig::validate_experts() const {
  auto refuse = [](const std::string& line) { throw std::invalid_argument("GPT config: " + line); };
  if (experts < 0)
    refuse(fmt::format("experts ({}) must be >= 0 (0: the dense model), e.g. 4", experts));
  if (experts == 0) return;
  if (top_k < 1) refuse(fmt::format("top_k ({}) must be at least 1, e.g. top_k 2", top_k));
  if (top_k > experts)
    refuse(fmt::format("top_k ({}) must be at most experts ({}): try top_k {}", top_k, experts,
                       std::min(2, experts)));
  if (moe_every < 1)
    refuse(fmt::format("moe_every ({}) must be at least 1 (1: every block is MoE)", moe_every));
  if (moe_every > layers)
    refuse(
        fmt::format("moe_every ({}) is above the {} layers, so no block would be MoE: use 1 "
                    "to {}",
                    moe_every, layers, layers));
  if (!(capacity_factor >= 0.0 && capacity_factor <= kMaxCapacityFactor))
    refuse(
        fmt::format("capacity_factor ({}) must be from 0 (dropless) to {:g}, e.g. 1.25; a "
                    "factor of experts / top_k ({:g}) already keeps every token",
                    capacity_factor, kMaxCapacityFactor, double(experts) / top_k));
  if (expert_hidden < 0)
    refuse(fmt::format("expert_hidden ({}) must be >= 0 (0: 4 * dim)", expert_hidden));
  if (!(aux_loss_coef >= 0.0f && aux_loss_coef <= kMaxAuxLossCoef))
    refuse(
        fmt::format("aux_loss_coef ({}) must be from 0 to {:g}, e.g. 0.01 (a larger weight "
                    "drowns the language-model loss)",
                    aux_loss_coef, kMaxAuxLossCoef));
}

void refuse_experts(const GPTConfig& cfg, const std::string& layout, const std::string& instead) {
  if (cfg.experts > 0)
    throw std::invalid_argument(
        fmt::format("{} cannot run experts (--experts {}): {}", layout, cfg.experts, instead));
}

// ---------------------------------------------------------------------------------- helpers

namespace {
Tensor activation(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, MemCategory::activations, dtype);
}
Tensor workspace(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, MemCategory::workspace, dtype);
}
// Layernorm statistics stay fp32 in every precision (as fused GPU layernorm kernels keep them).
Tensor statistics(const Shape& shape) {
  return Tensor::empty(shape, MemCategory::activations, DType::f32);
}

void fill_value(Tensor& t, float value) {
  if (t.defined() && t.has_data()) t.fill(value);
}
}  // namespace

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

// ---------------------------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(const std::string& name, int64_t dim)
    : weight(Param::declared(name + ".weight", {dim}, ParamInit::constant(1.0f))),
      bias(Param::declared(name + ".bias", {dim}, ParamInit::constant(0.0f))) {}

void LayerNorm::forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp) const {
  ops::layernorm_forward(out, mean, rstd, inp, weight.data, bias.data);
}

void LayerNorm::backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                         const Tensor& rstd) {
  ops::layernorm_backward(dinp, weight.grad, bias.grad, dout, inp, weight.data, mean, rstd);
}

// The layernorm kernel computes both gradients at once: each half runs it and discards the other
// part (the weight half is elementwise and cheap, so W recomputes it rather than faking a cost).
void LayerNorm::backward_input(Tensor& dinp, const Tensor& dout, const Tensor& inp,
                               const Tensor& mean, const Tensor& rstd) const {
  Tensor dw = Tensor::zeros(weight.grad.shape(), MemCategory::workspace, weight.grad.dtype());
  Tensor db = Tensor::zeros(bias.grad.shape(), MemCategory::workspace, bias.grad.dtype());
  ops::layernorm_backward(dinp, dw, db, dout, inp, weight.data, mean, rstd);
}

void LayerNorm::backward_weight(const Tensor& dout, const Tensor& inp, const Tensor& mean,
                                const Tensor& rstd) {
  Tensor dinp = Tensor::zeros(inp.shape(), MemCategory::workspace, inp.dtype());
  ops::layernorm_backward(dinp, weight.grad, bias.grad, dout, inp, weight.data, mean, rstd);
}

void LayerNorm::collect(ParamList& list) {
  list.push_back(&weight);
  list.push_back(&bias);
}

// ---------------------------------------------------------------------------------- Embedding

Embedding::Embedding(const GPTConfig& cfg)
    : wte(Param::declared("embedding.wte", {cfg.vocab, cfg.dim}, ParamInit::normal(0.02f))),
      wpe(Param::declared("embedding.wpe", {cfg.seq_len, cfg.dim}, ParamInit::normal(0.02f))) {}

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
  if (positions.empty()) return ops::embedding_forward(out, tokens, wte.data, wpe.data);
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
  if (positions.empty()) return ops::embedding_backward(wte.grad, wpe.grad, dout, tokens);
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
  list.push_back(&wpe);
}

// ---------------------------------------------------------------------------------- Block

BlockActivations BlockActivations::allocate(const GPTConfig& cfg, int64_t batch, int64_t seq) {
  return allocate(cfg, BlockShard::whole(cfg), batch, seq);
}

BlockActivations BlockActivations::allocate(const GPTConfig& cfg, const BlockShard& shard,
                                            int64_t batch, int64_t seq) {
  BlockActivations a;
  // the next block's input: always kept
  a.out = activation({batch, seq / shard.seq_parts, cfg.dim}, cfg.dtype);
  if (cfg.recompute == Recompute::full) return a;
  // Which blocks are dense is the block's to say: with experts, its forward allocates the MLP's.
  a.allocate_missing(cfg, shard, batch, seq, /*dense_mlp=*/cfg.experts == 0);
  if (cfg.recompute == Recompute::selective) a.att = Tensor();  // made in forward, then dropped
  return a;
}

void BlockActivations::allocate_missing(const GPTConfig& cfg, const BlockShard& shard,
                                        int64_t batch, int64_t seq, bool dense_mlp) {
  const int64_t b = batch, t = seq, c = cfg.dim;
  const int64_t t_mine = seq / shard.seq_parts;  // tokens of the layernorm/residual regions
  const int64_t local_c = int64_t{shard.heads} * cfg.head_size();  // channels of my heads
  auto need = [&](Tensor& x, const Shape& shape) {
    if (!x.defined()) x = activation(shape, cfg.dtype);
  };
  auto need_stat = [&](Tensor& x) {
    if (!x.defined()) x = statistics({b, t_mine});
  };
  need(ln1, {b, t_mine, c});
  need_stat(ln1_mean);
  need_stat(ln1_rstd);
  need(qkv, {b, t, 3 * local_c});
  need(att, {b, shard.heads, t, shard.attention_keys > 0 ? shard.attention_keys : t});
  need(attn_out, {b, t, local_c});
  need(res1, {b, t_mine, c});
  need(ln2, {b, t_mine, c});
  need_stat(ln2_mean);
  need_stat(ln2_rstd);
  if (dense_mlp) {
    need(fc, {b, t, shard.hidden});
    need(fc_gelu, {b, t, shard.hidden});
  }
  need(out, {b, t_mine, c});
}

int64_t BlockActivations::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &lse, &attn_out, &res1, &ln2,
                          &ln2_mean, &ln2_rstd, &fc, &fc_gelu, &out})
    total += t->bytes();
  return total + moe.bytes();
}

Block::Block(const GPTConfig& cfg, int index) : Block(cfg, index, BlockShard::whole(cfg)) {}

Block::Block(const GPTConfig& cfg, int index, const BlockShard& shard_)
    : heads(shard_.heads), config(cfg), shard(shard_) {
  const std::string p = fmt::format("blocks.{}.", index);
  const int64_t c = cfg.dim;
  const int64_t local_c = int64_t{shard.heads} * cfg.head_size();
  // GPT-2: the projections that write into the residual stream are scaled by 1/sqrt(2 layers),
  // so the residual's variance does not grow with depth (two such writes per block).
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  ln1 = LayerNorm(p + "ln1", c);
  qkv = Linear(p + "attn.qkv", c, 3 * local_c, 0.02f);
  attn_proj = Linear(p + "attn.proj", local_c, c, residual_std);
  ln2 = LayerNorm(p + "ln2", c);
  if (cfg.is_moe_block(index)) {
    moe = MoeLayer(cfg, index, shard);
    return;
  }
  fc = Linear(p + "mlp.fc", c, shard.hidden, 0.02f);
  mlp_proj = Linear(p + "mlp.proj", shard.hidden, c, residual_std);
}

namespace {
int64_t attention_keys(const BlockShard& shard, int64_t seq) {
  return shard.attention_keys > 0 ? shard.attention_keys : seq;
}

// A call into a comm object, with the layout's phase (if any) paused around it.
template <class Fn>
void communicating(const BlockComm& comm, Fn&& fn) {
  with_phase_paused(comm.phase, fn);
}
}  // namespace

// ---------------------------------------------------------------------------------- comm points

void Block::column_forward(const Linear& linear, Tensor& out, const Tensor& inp) const {
  if (!comm.linear) return linear.forward(out, inp);
  communicating(comm, [&] { comm.linear->column_forward(linear, out, inp); });
}

void Block::column_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                            const Tensor& inp) const {
  if (!comm.linear) return linear.backward(dinp, dout, inp);
  communicating(comm, [&] { comm.linear->column_backward(linear, dinp, dout, inp); });
}

void Block::row_forward(const Linear& linear, Tensor& out, const Tensor& inp) const {
  if (!comm.linear) return linear.forward(out, inp);
  communicating(comm, [&] { comm.linear->row_forward(linear, out, inp); });
}

void Block::row_backward(Linear& linear, Tensor& dinp, const Tensor& dout,
                         const Tensor& inp) const {
  if (!comm.linear) return linear.backward(dinp, dout, inp);
  communicating(comm, [&] { comm.linear->row_backward(linear, dinp, dout, inp); });
}

void Block::column_backward_input(const Linear& linear, Tensor& dinp, const Tensor& dout) const {
  if (!comm.linear) return ops::matmul(dinp, dout, linear.weight.data);
  communicating(comm, [&] { comm.linear->column_backward_input(linear, dinp, dout); });
}

void Block::attention_forward(Tensor& out, Tensor& att, Tensor& lse, const Tensor& qkv) const {
  // Plain attention keeps the probabilities themselves (no lse).
  if (!comm.attention) return ops::attention_forward(out, att, qkv, heads);
  const std::string cat = comm.phase ? comm.phase->category() : trace::cat::forward;
  communicating(comm, [&] { comm.attention->forward(out, att, lse, qkv, heads, cat); });
}

void Block::attention_backward(Tensor& dqkv, const Tensor& dout, const BlockActivations& a) const {
  if (!comm.attention) return ops::attention_backward(dqkv, dout, a.qkv, a.att, heads);
  const std::string cat = comm.phase ? comm.phase->category() : trace::cat::backward;
  communicating(comm, [&] {
    comm.attention->backward(dqkv, dout, a.qkv, a.attn_out, a.att, a.lse, heads, cat);
  });
}

// ---------------------------------------------------------------------------------- Block

void Block::forward(const Tensor& x, BlockActivations& a) const {
  a.allocate_missing(config, shard, x.dim(0), x.dim(1) * shard.seq_parts, !is_moe());
  forward_math(x, a);
  // Activation checkpointing: free what the backward will recompute.
  if (config.recompute == Recompute::selective) a.att = Tensor();
  if (config.recompute == Recompute::full) {
    Tensor out = a.out;
    a = BlockActivations{};
    a.input = x;
    a.out = out;
  }
}

void Block::forward_math(const Tensor& x, BlockActivations& a, MoePass pass) const {
  a.input = x;
  // attention branch: res1 = x + proj(attention(qkv(ln1(x))))
  ln1.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x);
  column_forward(qkv, a.qkv, a.ln1);
  attention_forward(a.attn_out, a.att, a.lse, a.qkv);
  row_forward(attn_proj, a.res1, a.attn_out);
  ops::add(a.res1, a.res1, x);
  // MLP branch: out = res1 + proj(gelu(fc(ln2(res1))))
  ln2.forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1);
  if (is_moe()) {  // out = res1 + moe(ln2(res1))
    moe.forward(a.out, a.ln2, a.moe, comm, pass);
  } else {
    column_forward(fc, a.fc, a.ln2);
    ops::gelu_forward(a.fc_gelu, a.fc);
    row_forward(mlp_proj, a.out, a.fc_gelu);
  }
  ops::add(a.out, a.out, a.res1);
}

BlockActivations Block::recomputed(const BlockActivations& kept) const {
  if (config.recompute == Recompute::none) return kept;
  const int64_t batch = kept.input.dim(0), seq = kept.input.dim(1) * shard.seq_parts;
  ComputeScope scope({.name = "recompute", .cat = trace::cat::recompute});
  BlockActivations a = kept;
  if (config.recompute == Recompute::full) {
    a.out = Tensor();  // re-made into a fresh tensor: the kept output may be read elsewhere
    a.allocate_missing(config, shard, batch, seq, !is_moe());
    forward_math(kept.input, a, MoePass::recompute);  // it communicates again, as Megatron's
  } else {  // selective: only the attention probabilities, from the kept qkv
    a.att = activation({batch, heads, seq, attention_keys(shard, seq)}, config.dtype);
    Tensor attn_out = workspace(kept.attn_out.shape(), config.dtype);  // same values as kept
    attention_forward(attn_out, a.att, a.lse, a.qkv);
  }
  return a;
}

void Block::backward(Tensor& dx, const Tensor& dout, const BlockActivations& kept) {
  const BlockActivations a = recomputed(kept);  // lives until the end of this backward
  backward_pass(dx, dout, a, nullptr);
}

void Block::backward_pass(Tensor& dx, const Tensor& dout, const BlockActivations& a,
                          BlockWeightGradInputs* deferred) {
  const Shape& shape = a.out.shape();  // [B,T,C]
  const DType dt = a.out.dtype();
  // The upstream gradients: scratch for a whole backward; a split one keeps each weighted layer's
  // for W, in the activations' type, so B + W round exactly as the whole backward does.
  Tensor d_out = dout, d_fc, d_ln2, d_res1, d_attn_out, d_qkv, d_ln1;
  if (deferred && is_moe())
    throw std::logic_error("an MoE block has no split backward (zero-bubble refuses experts)");
  if (deferred) {
    BlockWeightGradInputs& keep = *deferred;
    keep.d_out = activation(shape, dt);
    keep.d_out.copy_from(dout);  // the block's dout may be overwritten by dx
    d_out = keep.d_out;
    d_fc = keep.d_fc = activation(a.fc.shape(), dt);
    d_ln2 = keep.d_ln2 = activation(shape, dt);
    d_res1 = keep.d_res1 = activation(shape, dt);
    d_qkv = keep.d_qkv = activation(a.qkv.shape(), dt);
    d_ln1 = keep.d_ln1 = activation(shape, dt);
    d_attn_out = workspace(a.attn_out.shape(), dt);
  } else {
    if (!is_moe()) d_fc = workspace(a.fc.shape(), dt);
    d_ln2 = d_ln1 = workspace(shape, dt);
    d_res1 = workspace(shape, dt);
    d_attn_out = workspace(a.attn_out.shape(), dt);
    d_qkv = workspace(a.qkv.shape(), dt);
  }
  // Each layer's backward: input and weight gradients together, or (deferred) the input's only.
  // A row-parallel linear's input gradient is local under TP; a column-parallel one's is a
  // partial sum that the block's LinearComm completes.
  auto row = [&](Linear& linear, Tensor& dinp, const Tensor& dy, const Tensor& inp) {
    deferred ? linear.backward_input(dinp, dy) : row_backward(linear, dinp, dy, inp);
  };
  auto column = [&](Linear& linear, Tensor& dinp, const Tensor& dy, const Tensor& inp) {
    deferred ? column_backward_input(linear, dinp, dy) : column_backward(linear, dinp, dy, inp);
  };
  auto norm = [&](LayerNorm& ln, Tensor& dinp, const Tensor& dy, const Tensor& inp,
                  const Tensor& mean, const Tensor& rstd) {
    deferred ? ln.backward_input(dinp, dy, inp, mean, rstd)
             : ln.backward(dinp, dy, inp, mean, rstd);
  };

  // MLP branch, bottom-up. out = res1 + mlp(res1): res1 gets dout directly plus the branch.
  if (is_moe()) {
    moe.backward(d_ln2, d_out, a.ln2, a.moe, comm);
  } else {
    row(mlp_proj, d_fc, d_out, a.fc_gelu);
    ops::gelu_backward(d_fc, a.fc, d_fc);  // in place: elementwise
    column(fc, d_ln2, d_fc, a.ln2);
  }
  norm(ln2, d_res1, d_ln2, a.res1, a.ln2_mean, a.ln2_rstd);
  ops::axpy(d_res1, 1.0f, d_out);  // the residual path

  // attention branch. res1 = x + attn(x): x gets d_res1 directly plus the branch.
  row(attn_proj, d_attn_out, d_res1, a.attn_out);
  attention_backward(d_qkv, d_attn_out, a);
  column(qkv, d_ln1, d_qkv, a.ln1);
  norm(ln1, dx, d_ln1, a.input, a.ln1_mean, a.ln1_rstd);  // dout is not read after this
  ops::axpy(dx, 1.0f, d_res1);
}

void Block::backward_input(Tensor& dx, const Tensor& dout, const BlockActivations& acts,
                           BlockWeightGradInputs& keep) const {
  // The deferred pass reads the parameters and writes none of their gradients.
  const_cast<Block*>(this)->backward_pass(dx, dout, acts, &keep);
}

void Block::backward_weight(const BlockActivations& a, const BlockWeightGradInputs& keep) {
  mlp_proj.backward_weight(keep.d_out, a.fc_gelu);
  fc.backward_weight(keep.d_fc, a.ln2);
  ln2.backward_weight(keep.d_ln2, a.res1, a.ln2_mean, a.ln2_rstd);
  attn_proj.backward_weight(keep.d_res1, a.attn_out);
  qkv.backward_weight(keep.d_qkv, a.ln1);
  ln1.backward_weight(keep.d_ln1, a.input, a.ln1_mean, a.ln1_rstd);
}

void Block::collect(ParamList& list) {
  ln1.collect(list);
  qkv.collect(list);
  attn_proj.collect(list);
  ln2.collect(list);
  if (is_moe()) return moe.collect(list);
  fc.collect(list);
  mlp_proj.collect(list);
}

// ---------------------------------------------------------------------------------- Head

HeadActivations HeadActivations::allocate(const GPTConfig& cfg, int64_t batch, int64_t seq,
                                          int vocab_parts) {
  HeadActivations a;
  a.ln = activation({batch, seq, cfg.dim}, cfg.dtype);
  a.ln_mean = statistics({batch, seq});
  a.ln_rstd = statistics({batch, seq});
  a.logits = activation({batch, seq, cfg.vocab / vocab_parts}, cfg.dtype);
  a.dlogits = activation({batch, seq, cfg.vocab / vocab_parts}, cfg.dtype);
  return a;
}

Head::Head(const GPTConfig& cfg)
    : ln_f("head.ln_f", cfg.dim),
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

// ---------------------------------------------------------------------------------- GPT

GPTActivations GPTActivations::allocate(const GPTConfig& cfg, int64_t batch, int64_t seq) {
  return allocate(cfg, BlockShard::whole(cfg), batch, seq);
}

GPTActivations GPTActivations::allocate(const GPTConfig& cfg, const BlockShard& shard,
                                        int64_t batch, int64_t seq, int vocab_parts) {
  if (batch <= 0 || seq <= 0 || seq > cfg.seq_len)
    throw std::invalid_argument(fmt::format(
        "GPT activations: batch ({}) must be positive and seq ({}) in [1, seq_len = {}]", batch,
        seq, cfg.seq_len));
  GPTActivations a;
  if (seq % shard.seq_parts != 0)
    throw std::invalid_argument(fmt::format(
        "GPT activations: seq ({}) must divide into {} equal parts for sequence parallelism", seq,
        shard.seq_parts));
  a.embedded = activation({batch, seq / shard.seq_parts, cfg.dim}, cfg.dtype);
  for (int i = 0; i < cfg.layers; i++)
    a.blocks.push_back(BlockActivations::allocate(cfg, shard, batch, seq));
  a.head = HeadActivations::allocate(cfg, batch, seq, vocab_parts);
  return a;
}

namespace {
const GPTConfig& validated(const GPTConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

GPT::GPT(const GPTConfig& cfg) : GPT(cfg, BlockShard::whole(validated(cfg))) {
  // Every parameter replicated: the single-device model. 2-byte types are rounded once from the
  // fp32 initial values straight into their 2-byte tensors (the optimizer's fp32 master weights
  // start from these rounded values too, so every precision starts alike).
  materialise(params(), cfg.seed, cfg.dtype);
}

GPT::GPT(const GPTConfig& cfg, const BlockShard& shard)
    : embedding(validated(cfg)), head(cfg), config_(cfg), shard_(shard) {
  if (cfg.tie_embeddings) head.tied = &embedding.wte;
  blocks.reserve(static_cast<size_t>(cfg.layers));
  for (int i = 0; i < cfg.layers; i++) blocks.emplace_back(cfg, i, shard);
}

void GPT::set_block_comm(const BlockComm& comm) {
  for (Block& block : blocks) block.comm = comm;
}

void GPT::set_loss_grad_scale(float scale) {
  for (Block& block : blocks) block.moe.loss_grad_scale = scale;
}

float GPT::aux_loss() const {
  float total = 0.0f;
  for (const Block& block : blocks)
    if (block.is_moe()) total += block.moe.last.aux_loss;
  return total;
}

std::vector<MoeStats> GPT::moe_stats() const {
  std::vector<MoeStats> stats;
  for (const Block& block : blocks)
    if (block.is_moe()) stats.push_back(block.moe.last);
  return stats;
}

ParamList GPT::params() {
  ParamList list;
  embedding.collect(list);
  for (Block& block : blocks) block.collect(list);
  head.collect(list);
  return list;
}

void GPT::zero_grad() {
  for (Param* p : params()) fill_value(p->grad, 0.0f);
}

int64_t GPT::num_params() const {
  int64_t n = 0;
  for (Param* p : const_cast<GPT*>(this)->params()) n += shape_numel(p->shape);
  return n;
}

double GPT::flops_per_token(int64_t seq) const {
  return 6.0 * static_cast<double>(active_params()) +
         6.0 * config_.layers * static_cast<double>(seq) * config_.dim;
}

int64_t GPT::active_params() const {
  int64_t n = 0;
  for (Param* p : const_cast<GPT*>(this)->params()) n += shape_numel(p->shape);
  // Each token runs top_k of an MoE block's experts (the router runs whole).
  for (const Block& block : blocks)
    if (block.is_moe())
      for (const Param* p :
           {&block.moe.fc_weight, &block.moe.fc_bias, &block.moe.proj_weight, &block.moe.proj_bias})
        n -= shape_numel(p->shape) / block.moe.local_experts *
             (block.moe.local_experts - block.moe.top_k);
  return n;
}

float GPT::forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                   GPTActivations& acts, float grad_scale) {
  embedding.forward(acts.embedded, tokens);
  const Tensor* x = &acts.embedded;
  for (size_t i = 0; i < blocks.size(); i++) {
    blocks[i].forward(*x, acts.blocks[i]);
    x = &acts.blocks[i].out;
  }
  set_loss_grad_scale(grad_scale);
  return head.forward_loss(*x, targets, acts.head, grad_scale);
}

void GPT::backward(std::span<const int32_t> tokens, GPTActivations& acts) {
  // One gradient buffer for the residual stream, reused by every layer (dx may alias dout).
  Tensor dx = workspace(acts.embedded.shape(), acts.embedded.dtype());
  head.backward(dx, acts.head);
  for (size_t i = blocks.size(); i-- > 0;) blocks[i].backward(dx, dx, acts.blocks[i]);
  embedding.backward(dx, tokens);
}

float GPT::forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            int64_t batch, int64_t seq, float grad_scale) {
  GPTActivations acts = GPTActivations::allocate(config_, shard_, batch, seq);
  float loss_value = forward(tokens, targets, acts, grad_scale);
  backward(tokens, acts);
  return loss_value;
}

float GPT::loss(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t batch,
                int64_t seq) {
  GPTActivations acts = GPTActivations::allocate(config_, shard_, batch, seq);
  return forward(tokens, targets, acts);
}

}  // namespace mgpu

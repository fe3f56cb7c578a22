// The block: its activations, its communication points (the layout's comm, with the layout's
// trace phase paused around each call), its forward, and its backward written once for both the
// whole backward and zero-bubble's split.
#include "core/model/block.h"

#include <fmt/format.h>

#include "core/model/init.h"
#include "core/model/model_tensors.h"
#include "core/model/trace_phase.h"
#include "core/ops/ops.h"
#include "core/runtime/context.h"

namespace mgpu {

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
  const int64_t local_kv = int64_t{shard.local_kv_heads()} * cfg.head_size();
  auto need = [&](Tensor& x, const Shape& shape) {
    if (!x.defined()) x = activation(shape, cfg.dtype);
  };
  auto need_stat = [&](Tensor& x, bool kept = true) {
    if (!x.defined() && kept) x = statistics({b, t_mine});
  };
  need(ln1, {b, t_mine, c});
  need_stat(ln1_mean, !cfg.rmsnorm());  // RMSNorm keeps no mean
  need_stat(ln1_rstd);
  need(qkv, {b, t, local_c + 2 * local_kv});
  need(att, {b, shard.heads, t, shard.attention_keys > 0 ? shard.attention_keys : t});
  need(attn_out, {b, t, local_c});
  need(res1, {b, t_mine, c});
  need(ln2, {b, t_mine, c});
  need_stat(ln2_mean, !cfg.rmsnorm());
  need_stat(ln2_rstd);
  if (dense_mlp) {
    need(fc, {b, t, cfg.fc_width(shard.hidden)});
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
  const int64_t local_kv = int64_t{shard.local_kv_heads()} * cfg.head_size();
  const bool bias = cfg.style.bias;
  // GPT-2: the projections that write into the residual stream are scaled by 1/sqrt(2 layers),
  // so the residual's variance does not grow with depth (two such writes per block).
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  ln1 = LayerNorm(p + "ln1", c, cfg.style.norm);
  qkv = Linear(p + "attn.qkv", c, local_c + 2 * local_kv, 0.02f, bias);
  attn_proj = Linear(p + "attn.proj", local_c, c, residual_std, bias);
  ln2 = LayerNorm(p + "ln2", c, cfg.style.norm);
  if (cfg.is_moe_block(index)) {
    moe = MoeLayer(cfg, index, shard);
    return;
  }
  fc = Linear(p + "mlp.fc", c, cfg.fc_width(shard.hidden), 0.02f, bias);
  mlp_proj = Linear(p + "mlp.proj", shard.hidden, c, residual_std, bias);
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
  const AttentionHeads h = attention_heads();
  // Plain attention keeps the probabilities themselves (no lse).
  if (!comm.attention) return ops::attention_forward(out, att, qkv, h.heads, h.kv_heads);
  const std::string cat = comm.phase ? comm.phase->category() : trace::cat::forward;
  communicating(comm, [&] { comm.attention->forward(out, att, lse, qkv, h, cat); });
}

void Block::attention_backward(Tensor& dqkv, const Tensor& dout, const BlockActivations& a) const {
  const AttentionHeads h = attention_heads();
  if (!comm.attention)
    return ops::attention_backward(dqkv, dout, a.qkv, a.att, h.heads, h.kv_heads);
  const std::string cat = comm.phase ? comm.phase->category() : trace::cat::backward;
  communicating(
      comm, [&] { comm.attention->backward(dqkv, dout, a.qkv, a.attn_out, a.att, a.lse, h, cat); });
}

// q and k (the first H + KV heads of each qkv row) turn by each token's position; v does not.
// The backward turns their gradient back: the rotation's transpose.
void Block::rotate_positions(Tensor& x, bool backward) const {
  if (!config.rope()) return;
  std::vector<int32_t> iota;
  std::span<const int32_t> pos = positions;
  if (positions.empty()) {
    iota.resize(static_cast<size_t>(x.dim(1)));
    for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int32_t>(i);
    pos = iota;
  }
  const int rotated = heads + shard.local_kv_heads();
  const float theta = config.style.rope_theta;
  backward ? ops::rope_backward(x, pos, rotated, config.head_size(), theta)
           : ops::rope_forward(x, pos, rotated, config.head_size(), theta);
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
  rotate_positions(a.qkv, /*backward=*/false);
  attention_forward(a.attn_out, a.att, a.lse, a.qkv);
  row_forward(attn_proj, a.res1, a.attn_out);
  ops::add(a.res1, a.res1, x);
  // MLP branch: out = res1 + proj(gelu(fc(ln2(res1)))), or proj(swiglu(fc(...))) (gate | up)
  ln2.forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1);
  if (is_moe()) {  // out = res1 + moe(ln2(res1))
    moe.forward(a.out, a.ln2, a.moe, comm, pass);
  } else {
    column_forward(fc, a.fc, a.ln2);
    mlp_activation_forward(a.fc_gelu, a.fc, config.style.mlp);
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
    // GELU's gradient is elementwise (computed in place in d_fc); SwiGLU's reads [.., F] and
    // writes gate | up [.., 2F], so its input gradient needs a buffer of its own.
    Tensor d_act = config.swiglu() ? workspace(a.fc_gelu.shape(), dt) : d_fc;
    row(mlp_proj, d_act, d_out, a.fc_gelu);
    mlp_activation_backward(d_fc, a.fc, d_act, config.style.mlp);
    column(fc, d_ln2, d_fc, a.ln2);
  }
  norm(ln2, d_res1, d_ln2, a.res1, a.ln2_mean, a.ln2_rstd);
  ops::axpy(d_res1, 1.0f, d_out);  // the residual path

  // attention branch. res1 = x + attn(x): x gets d_res1 directly plus the branch.
  row(attn_proj, d_attn_out, d_res1, a.attn_out);
  attention_backward(d_qkv, d_attn_out, a);
  rotate_positions(d_qkv, /*backward=*/true);
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

}  // namespace mgpu

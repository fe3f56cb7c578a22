// The tiny GPT: each layer's forward and backward are a few op calls (core/ops/ops.h); the
// backward of a layer is its forward read bottom-up.
#include "core/model/gpt.h"

#include <fmt/format.h>

#include <stdexcept>

#include "core/model/init.h"
#include "core/model/model_tensors.h"
#include "core/ops/ops.h"

namespace mgpu {

namespace {
void fill_value(Tensor& t, float value) {
  if (t.defined() && t.has_data()) t.fill(value);
}
}  // namespace

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

void GPT::set_positions(const std::vector<int32_t>& positions) {
  embedding.positions = positions;
  for (Block& block : blocks) block.positions = positions;
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
  for (Block& block : const_cast<GPT*>(this)->blocks)
    if (block.is_moe())
      for (const Param* p : block.moe.expert_params())
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

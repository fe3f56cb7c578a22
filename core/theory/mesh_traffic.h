// Closed forms of the bytes one rank of a dp x tp x pp (x cp) mesh sends per step, by group, as
// the hybrid lesson prints them beside the trace's measured sent bytes. The ring shares come
// from collectives.h; the counts follow the engine's communication points (Megatron-LM's f/g
// all-reduces for tp: Shoeybi et al. 2019, section 3; one activation and one gradient per
// micro-batch and neighbour for pp; ring attention's K|V hops for cp: Liu et al. 2023).
#pragma once
#include <cstdint>

namespace mgpu::theory {

// tp: `all_reduces` ring all-reduces per layer and micro-batch of an `activation_bytes` buffer,
// 2(t-1)/t of it each, over `layers` layers and `microbatches` micro-batches.
double tp_bytes_sent(int tp, int all_reduces, int64_t layers, int microbatches,
                     int64_t activation_bytes);

// tp with Megatron-LM's options (the hybrid engine's --sp and --vocab-parallel-head), bytes one
// rank sends per step. Each micro-batch's activation is `activation_elements` elements, moved in
// `activation_bytes_each` B as such (all-gathers) and in `sum_bytes_each` B as partial sums.
//   TP: the f/g ring all-reduces above (4 per layer, 6 under full recompute).
//   SP (Korthikanti et al. 2022): each all-reduce becomes a reduce-scatter of the partial sums
//     plus an all-gather ((t-1)/t each), and the backward gathers the column linears' input again
//     (2 more all-gathers per layer); the last stage gathers the head's input and the first the
//     embedding's gradient (one all-gather per micro-batch each); the stage's layernorm
//     gradients (4C fp32 per layer) are all-reduced once per step.
//   vocabulary-parallel head (last stage): per micro-batch an all-gather of 3 fp32 per token and
//     an all-reduce of the head's input gradient (partial sums).
//   MoE blocks (not under SP): their experts are not tensor-split, so only attention's f and g
//     communicate: half a dense block's collectives.
struct TpTraffic {
  int tp = 1;
  int64_t layers = 0;
  int64_t moe_layers = 0;  // of `layers`, those whose MLP is a mixture of experts
  int microbatches = 1;
  int64_t activation_elements = 0;  // B_micro * T * C
  int64_t tokens = 0;               // B_micro * T
  int64_t dim = 0;                  // C
  int activation_bytes_each = 4, sum_bytes_each = 4;
  bool full_recompute = false, sequence_parallel = false, vocab_parallel_head = false;
  bool first_stage = false, last_stage = false;
};
double tp_bytes_sent(const TpTraffic& t);

// pp: point-to-point sends of pipeline stage `stage` of `stages` holding `chunks` chunks per
// micro-batch: chunk c is virtual stage cP+s, which sends its output on unless it is the last and
// its input gradient back unless it is the first.
int64_t pipeline_sends(int stage, int stages, int chunks);

// dp: the stage's fp32 gradients all-reduced once per step, 2(d-1)/d x gradient bytes; under
// ZeRO (1, 2 or 3) a reduce-scatter of the gradients and an all-gather of the `weight_bytes`-B
// parameters, (d-1)/d x (gradient + parameter bytes).
double dp_bytes_sent(int dp, int64_t gradient_bytes, int weight_bytes, bool zero);

// cp: one ring-attention K|V block, the keys and values of a rank's `local_tokens` tokens of each
// of `batch` sequences over `kv_heads` heads of `head_size`: B x T/cp x 2 x KV x D elements.
// Grouped-query attention's blocks are KV/H of multi-head attention's: only the kv heads travel.
int64_t cp_kv_block_elements(int64_t batch, int64_t local_tokens, int64_t kv_heads,
                             int64_t head_size);

// cp: per layer and micro-batch ring attention's K|V blocks of `kv_elements` (cp-1 hops forward,
// again in a recomputed forward, cp-1 backward, in `weight_bytes`) and the dK|dV accumulators (cp
// hops, fp32); then the gradients' all-reduce over cp.
double cp_bytes_sent(int cp, int64_t layers, int microbatches, int64_t kv_elements,
                     bool recomputed_forward, int weight_bytes, int64_t gradient_bytes);

}  // namespace mgpu::theory

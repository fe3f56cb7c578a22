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

// pp: point-to-point sends of pipeline stage `stage` of `stages` holding `chunks` chunks per
// micro-batch: chunk c is virtual stage cP+s, which sends its output on unless it is the last and
// its input gradient back unless it is the first.
int64_t pipeline_sends(int stage, int stages, int chunks);

// dp: the stage's fp32 gradients all-reduced once per step, 2(d-1)/d x gradient bytes; under
// ZeRO-1 a reduce-scatter of the gradients and an all-gather of the `weight_bytes`-B parameters,
// (d-1)/d x (gradient + parameter bytes).
double dp_bytes_sent(int dp, int64_t gradient_bytes, int weight_bytes, bool zero1);

// cp: per layer and micro-batch ring attention's K|V blocks of `kv_elements` (cp-1 hops forward,
// again in a recomputed forward, cp-1 backward, in `weight_bytes`) and the dK|dV accumulators (cp
// hops, fp32); then the gradients' all-reduce over cp.
double cp_bytes_sent(int cp, int64_t layers, int microbatches, int64_t kv_elements,
                     bool recomputed_forward, int weight_bytes, int64_t gradient_bytes);

}  // namespace mgpu::theory

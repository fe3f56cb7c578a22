// Per-group wire bytes of the mesh (see mesh_traffic.h).
#include "core/theory/mesh_traffic.h"

#include "core/theory/collectives.h"

namespace mgpu::theory {

double tp_bytes_sent(int tp, int all_reduces, int64_t layers, int microbatches,
                     int64_t activation_bytes) {
  return ring_all_reduce_factor(tp) * all_reduces * layers * microbatches * activation_bytes;
}

double tp_bytes_sent(const TpTraffic& t) {
  if (t.tp <= 1) return 0;
  const double gather = double(t.tp - 1) / t.tp;  // an all-gather's or reduce-scatter's share
  const double act = double(t.activation_elements);
  const double sums = act * t.sum_bytes_each, whole = act * t.activation_bytes_each;
  const int collectives = t.full_recompute ? 6 : 4;  // f/g points run per layer and micro-batch
  double per_microbatch = 0;
  if (!t.sequence_parallel) {
    const double tp_layers = double(t.layers) - 0.5 * double(t.moe_layers);  // see the header
    per_microbatch = tp_layers * collectives * 2 * gather * sums;
  } else {
    per_microbatch = double(t.layers) * collectives * gather * (sums + whole) +
                     double(t.layers) * 2 * gather * whole;
    if (t.last_stage) per_microbatch += gather * whole;   // the head's input gathered
    if (t.first_stage) per_microbatch += gather * whole;  // the embedding's gradient gathered
  }
  if (t.vocab_parallel_head && t.last_stage)
    per_microbatch += gather * t.tp * 3.0 * 4 * double(t.tokens) + 2 * gather * sums;
  const double layernorms =
      t.sequence_parallel ? 2 * gather * 4.0 * 4 * double(t.dim) * double(t.layers) : 0;
  return per_microbatch * t.microbatches + layernorms;
}

int64_t pipeline_sends(int stage, int stages, int chunks) {
  int64_t sends = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int virtual_stage = chunk * stages + stage;
    sends += (virtual_stage < stages * chunks - 1 ? 1 : 0) + (virtual_stage > 0 ? 1 : 0);
  }
  return sends;
}

double dp_bytes_sent(int dp, int64_t gradient_bytes, int weight_bytes, bool zero) {
  const double ring = ring_all_reduce_factor(dp);
  return zero ? ring / 2 * (gradient_bytes + gradient_bytes / 4 * weight_bytes)
              : ring * gradient_bytes;
}

int64_t cp_kv_block_elements(int64_t batch, int64_t local_tokens, int64_t kv_heads,
                             int64_t head_size) {
  return batch * local_tokens * 2 * kv_heads * head_size;
}

double cp_bytes_sent(int cp, int64_t layers, int microbatches, int64_t kv_elements,
                     bool recomputed_forward, int weight_bytes, int64_t gradient_bytes) {
  if (cp == 1) return 0.0;
  const int kv_hops = (cp - 1) * (recomputed_forward ? 3 : 2);
  return double(layers) * microbatches *
             (double(kv_hops) * kv_elements * weight_bytes + cp * kv_elements * 4.0) +
         ring_all_reduce_factor(cp) * gradient_bytes;
}

}  // namespace mgpu::theory

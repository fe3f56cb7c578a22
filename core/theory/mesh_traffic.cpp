// Per-group wire bytes of the mesh (see mesh_traffic.h).
#include "core/theory/mesh_traffic.h"

#include "core/theory/collectives.h"

namespace mgpu::theory {

double tp_bytes_sent(int tp, int all_reduces, int64_t layers, int microbatches,
                     int64_t activation_bytes) {
  return ring_all_reduce_factor(tp) * all_reduces * layers * microbatches * activation_bytes;
}

int64_t pipeline_sends(int stage, int stages, int chunks) {
  int64_t sends = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int virtual_stage = chunk * stages + stage;
    sends += (virtual_stage < stages * chunks - 1 ? 1 : 0) + (virtual_stage > 0 ? 1 : 0);
  }
  return sends;
}

double dp_bytes_sent(int dp, int64_t gradient_bytes, int weight_bytes, bool zero1) {
  const double ring = ring_all_reduce_factor(dp);
  return zero1 ? ring / 2 * (gradient_bytes + gradient_bytes / 4 * weight_bytes)
               : ring * gradient_bytes;
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

// Exercise 07, reference: the online-softmax merge. Two softmaxes over disjoint key sets combine
// exactly through their log-sum-exps: weights exp(lse_a - lse) and exp(lse_b - lse) with
// lse = log(exp(lse_a) + exp(lse_b)). The forward is the op ring attention runs
// (ops::attention_merge); the backward is written out here.
#include <cmath>

#include "core/ops/ops.h"
#include "exercises/exercises.h"

namespace mgpu::reference {

void merge_attention(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  ops::attention_merge(out, lse, block_out, block_lse);
}

void merge_attention_backward(Tensor& d_part_out, Tensor& d_part_lse, const Tensor& dout,
                              const Tensor& out, const Tensor& lse, const Tensor& part_out,
                              const Tensor& part_lse) {
  const int64_t b = out.dim(0), t = out.dim(1), c = out.dim(2), heads = lse.dim(1);
  const int64_t hs = c / heads;
  float* d_out = d_part_out.f32();
  float* d_lse = d_part_lse.f32();
  const float *g = dout.f32(), *o = out.f32(), *l = lse.f32(), *po = part_out.f32(),
              *pl = part_lse.f32();
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < t; i++) {
        const int64_t row = (bi * heads + h) * t + i, at = (bi * t + i) * c + h * hs;
        // A part that saw no key (lse -inf) had weight 0 and gets no gradient.
        const float w = std::isinf(pl[row]) ? 0.0f : std::exp(pl[row] - l[row]);
        float dot = 0.0f;
        for (int64_t d = 0; d < hs; d++) {
          d_out[at + d] = w * g[at + d];
          if (w != 0.0f) dot += g[at + d] * (po[at + d] - o[at + d]);
        }
        d_lse[row] = w * dot;  // d out / d part_lse = w (part_out - out)
      }
}

}  // namespace mgpu::reference

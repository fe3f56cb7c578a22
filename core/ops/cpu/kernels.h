// CPU kernels: plain functions on raw float pointers and sizes, in the style of llm.c. Each does
// one thing; ops.h is the typed entry point (cost accounting, device dispatch, shape checks) and
// the only caller. Conventions:
//  - "N" is the number of rows (tokens, B*T), "C" the channels of a row.
//  - Activation gradients (dinp, dqkv, dlogits, ...) are OVERWRITTEN.
//  - Parameter gradients (dweight, dbias, dwte, ...) are ACCUMULATED (+=), so gradient
//    accumulation over micro-batches is just "run backward again".
#pragma once
#include <cstdint>

#include "core/ops/cpu/vectorize.h"  // every declaration carries its clones (clang needs it)

namespace mgpu::cpu {

// C[M,N] = op(A) @ op(B) + beta * C, row-major; op(X) = X^T when trans_X. Uses OpenBLAS sgemm.
void matmul(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a,
            bool trans_b, float beta);

MGPU_VECTOR_CLONES_DECL void bias_add(float* out, const float* bias, int64_t n,
                                      int64_t c);  // out[n,:] += bias
MGPU_VECTOR_CLONES_DECL void bias_grad(float* dbias, const float* dout, int64_t n,
                                       int64_t c);  // dbias += colsum(dout)
MGPU_VECTOR_CLONES_DECL void add(float* out, const float* a, const float* b,
                                 int64_t count);  // out = a + b
MGPU_VECTOR_CLONES_DECL void axpy(float* y, float alpha, const float* x,
                                  int64_t count);                          // y += alpha * x
MGPU_VECTOR_CLONES_DECL void scale(float* x, float alpha, int64_t count);  // x *= alpha

MGPU_VECTOR_CLONES_DECL void gelu_forward(float* out, const float* inp, int64_t count);
MGPU_VECTOR_CLONES_DECL void gelu_backward(float* dinp, const float* inp, const float* dout,
                                           int64_t count);

MGPU_VECTOR_CLONES_DECL void layernorm_forward(float* out, float* mean, float* rstd,
                                               const float* inp, const float* weight,
                                               const float* bias, int64_t n, int64_t c);
MGPU_VECTOR_CLONES_DECL void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                                const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int64_t n, int64_t c);

MGPU_VECTOR_CLONES_DECL void softmax_forward(float* out, const float* inp, int64_t n, int64_t c);
MGPU_VECTOR_CLONES_DECL void softmax_backward(float* dinp, const float* out, const float* dout,
                                              int64_t n, int64_t c);

// Causal multi-head self-attention. qkv [B,T,3C] holds q | k | v per token; att [B,H,T,T]
// keeps the probabilities for backward (entries above the diagonal stay 0).
MGPU_VECTOR_CLONES_DECL void attention_forward(float* out, float* att, const float* qkv, int64_t b,
                                               int64_t t, int64_t c, int64_t heads);
MGPU_VECTOR_CLONES_DECL void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                                const float* att, int64_t b, int64_t t, int64_t c,
                                                int64_t heads);

// out[b,t,:] = wte[token] + wpe[t]
MGPU_VECTOR_CLONES_DECL void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                               const float* wpe, int64_t b, int64_t t, int64_t c);
MGPU_VECTOR_CLONES_DECL void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                                const int32_t* tokens, int64_t b, int64_t t,
                                                int64_t c);

// Mean cross-entropy over n rows of logits [n,v]; writes dlogits = grad_scale * dloss/dlogits
// (dlogits may alias logits). Returns the mean loss.
MGPU_VECTOR_CLONES_DECL float cross_entropy_forward_backward(float* dlogits, const float* logits,
                                                             const int32_t* targets, int64_t n,
                                                             int64_t v, float grad_scale);
MGPU_VECTOR_CLONES_DECL float cross_entropy_loss(const float* logits, const int32_t* targets,
                                                 int64_t n, int64_t v);

}  // namespace mgpu::cpu

// Exercise 06: the column- and row-parallel linear. Replace the bodies with your implementation
// (see docs/exercises/06-tensor-parallel.md), then run `mgpu run tensor_parallel --impl mine` and
// `mgpu run sequence_parallel --impl mine`: your linears drive every block of both, with the
// collectives `c` each layout passes (TP: an identity gather and an all-reduce sum; SP: an
// all-gather and a reduce-scatter along the sequence).
#include <stdexcept>

#include "core/ops/ops.h"                   // ops::linear_forward, ops::linear_backward
#include "core/parallel/tensor_parallel.h"  // parallel::LinearCollectives
#include "exercises/exercises.h"

namespace mgpu::mine {

namespace {
[[noreturn]] void todo() {
  throw ex::NotImplemented("not implemented yet: see docs/exercises/06-tensor-parallel.md");
}
}  // namespace

void column_parallel_forward(Tensor& y_local, const Tensor& x, const Tensor& w_local,
                             const Tensor& b_local, parallel::LinearCollectives& c) {
  (void)y_local, (void)x, (void)w_local, (void)b_local, (void)c;
  todo();  // TODO: f's forward (c.gather), then the local linear
}

void column_parallel_backward(Tensor& dx, Tensor& dw_local, Tensor& db_local,
                              const Tensor& dy_local, const Tensor& x, const Tensor& w_local,
                              parallel::LinearCollectives& c) {
  (void)dx, (void)dw_local, (void)db_local, (void)dy_local, (void)x, (void)w_local, (void)c;
  todo();  // TODO: the input again (c.gather), the local linear's backward into a
           // c.partial_buffer, then f's backward (c.sum into dx)
}

void row_parallel_forward(Tensor& y, const Tensor& x_local, const Tensor& w_local, const Tensor& b,
                          parallel::LinearCollectives& c) {
  (void)y, (void)x_local, (void)w_local, (void)b, (void)c;
  todo();  // TODO: the local linear (bias where given) into a c.partial_buffer, then g's forward
           // (c.sum into y)
}

void row_parallel_backward(Tensor& dx_local, Tensor& dw_local, Tensor& db, const Tensor& dy,
                           const Tensor& x_local, const Tensor& w_local,
                           parallel::LinearCollectives& c) {
  (void)dx_local, (void)dw_local, (void)db, (void)dy, (void)x_local, (void)w_local, (void)c;
  todo();  // TODO: g's backward (c.gather of dy), then the local linear's backward
}

}  // namespace mgpu::mine

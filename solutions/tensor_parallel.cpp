// Exercise 06, reference: Megatron's column- and row-parallel linear. The matmul is the ordinary
// linear on this rank's slice of W; all that tensor parallelism adds is where f and g sit, and
// they are the same two collectives of `c` swapped: f gathers forward and sums backward, g sums
// forward and gathers backward. (TP: gather is the identity, sum an all-reduce; SP: an all-gather
// and a reduce-scatter along the sequence.)
#include "core/parallel/tensor_parallel.h"
#include "core/ops/ops.h"
#include "exercises/exercises.h"

namespace mgpu::reference {

void column_parallel_forward(Tensor& y_local, const Tensor& x, const Tensor& w_local,
                             const Tensor& b_local, parallel::LinearCollectives& c) {
  const Tensor input = c.gather(x);  // f's forward: the whole input on every rank
  ops::linear_forward(y_local, input, w_local, b_local);
}

void column_parallel_backward(Tensor& dx, Tensor& dw_local, Tensor& db_local,
                              const Tensor& dy_local, const Tensor& x, const Tensor& w_local,
                              parallel::LinearCollectives& c) {
  const Tensor input = c.gather(x);  // the input the forward saw (SP dropped it: gather again)
  Tensor dinput = c.partial_buffer(dx);
  ops::linear_backward(dinput, dw_local, db_local, dy_local, input, w_local);
  c.sum(dx, dinput);  // f's backward: my output columns' share of dx, summed over the ranks
}

void row_parallel_forward(Tensor& y, const Tensor& x_local, const Tensor& w_local, const Tensor& b,
                          parallel::LinearCollectives& c) {
  Tensor partial = c.partial_buffer(y);
  ops::linear_forward(partial, x_local, w_local, b);
  c.sum(y, partial);  // g's forward: partial products of my input columns, summed over the ranks
}

void row_parallel_backward(Tensor& dx_local, Tensor& dw_local, Tensor& db, const Tensor& dy,
                           const Tensor& x_local, const Tensor& w_local,
                           parallel::LinearCollectives& c) {
  const Tensor grad = c.gather(dy);  // g's backward: the whole output's gradient on every rank
  ops::linear_backward(dx_local, dw_local, db, grad, x_local, w_local);
}

}  // namespace mgpu::reference

// Exercise 06: the column- and row-parallel linear. Replace the bodies with your implementation
// (see docs/exercises/06-tensor-parallel.md), then run `mgpu run tensor_parallel --impl mine`:
// your linears (and your all-reduces) drive every block of the tensor-parallel run.
#include <stdexcept>

#include "exercises/exercises.h"

namespace mgpu::mine {

namespace {
[[noreturn]] void todo() {
  throw ex::NotImplemented("not implemented yet: see docs/exercises/06-tensor-parallel.md");
}
}  // namespace

void column_parallel_forward(Tensor& y_local, const Tensor& x, const Tensor& w_local,
                             const Tensor& b_local, comm::Comm& tp) {
  (void)y_local, (void)x, (void)w_local, (void)b_local, (void)tp;
  todo();  // TODO: f (identity forward), then the local linear
}

void column_parallel_backward(Tensor& dx, Tensor& dw_local, Tensor& db_local,
                              const Tensor& dy_local, const Tensor& x, const Tensor& w_local,
                              comm::Comm& tp) {
  (void)dx, (void)dw_local, (void)db_local, (void)dy_local, (void)x, (void)w_local, (void)tp;
  todo();  // TODO: the local linear's backward, then f's backward
}

void row_parallel_forward(Tensor& y, const Tensor& x_local, const Tensor& w_local, const Tensor& b,
                          comm::Comm& tp) {
  (void)y, (void)x_local, (void)w_local, (void)b, (void)tp;
  todo();  // TODO: the local linear (bias where given), then g
}

void row_parallel_backward(Tensor& dx_local, Tensor& dw_local, Tensor& db, const Tensor& dy,
                           const Tensor& x_local, const Tensor& w_local, comm::Comm& tp) {
  (void)dx_local, (void)dw_local, (void)db, (void)dy, (void)x_local, (void)w_local, (void)tp;
  todo();  // TODO: g's backward, then the local linear's backward
}

}  // namespace mgpu::mine

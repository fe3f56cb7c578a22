#include "core/parallel/flat_gradients.h"

namespace mgpu::parallel {

void all_reduce_gradients(const ParamList& params, comm::Comm& group, comm::ReduceOp op) {
  if (params.empty()) return;
  int64_t total = 0;
  for (const Param* p : params) total += p->grad.numel();
  Tensor flat = Tensor::empty({total}, MemCategory::comm_buffers, params.front()->grad.dtype());
  int64_t offset = 0;
  for (const Param* p : params) {
    flat.flat_range(offset, offset + p->grad.numel()).copy_from(p->grad);
    offset += p->grad.numel();
  }
  group.all_reduce(flat, op);
  offset = 0;
  for (Param* p : params) {
    p->grad.copy_from(flat.flat_range(offset, offset + p->grad.numel()));
    offset += p->grad.numel();
  }
}

}  // namespace mgpu::parallel

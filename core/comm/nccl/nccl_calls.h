// Small wrappers of NCCL and CUDA calls for the NCCL backend: errors as CommError, the NCCL
// names of our types, and the steps a communicator needs around its collectives.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/comm/comm.h"

namespace mgpu::comm::nccl {

void check(ncclResult_t r, const char* what);  // throws CommError("what: NCCL's words")
void check(cudaError_t r, const char* what);

ncclDataType_t nccl_type(DType t);
ncclRedOp_t nccl_op(ReduceOp op);
inline int elem_bytes(const Tensor& t) {
  return static_cast<int>(dtype_size(t.dtype()));
}

int user_rank(ncclComm_t comm);  // ncclCommUserRank
int comm_size(ncclComm_t comm);  // ncclCommCount
// A non-blocking stream on `device` (ours never wait on the legacy default stream).
cudaStream_t new_stream(int device);

// `calls` (ncclSend/ncclRecv...) between ncclGroupStart and ncclGroupEnd: NCCL runs them
// together.
template <class Calls>
void grouped(Calls calls) {
  check(ncclGroupStart(), "ncclGroupStart");
  calls();
  check(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace mgpu::comm::nccl

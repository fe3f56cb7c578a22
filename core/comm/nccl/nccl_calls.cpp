#include "core/comm/nccl/nccl_calls.h"

#include <fmt/format.h>

namespace mgpu::comm::nccl {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw CommError(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}
void check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw CommError(fmt::format("{}: {}", what, cudaGetErrorString(r)));
}

ncclDataType_t nccl_type(DType t) {
  return t == DType::f32 ? ncclFloat32 : t == DType::bf16 ? ncclBfloat16 : ncclFloat16;
}
ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclAvg;
}

int user_rank(ncclComm_t comm) {
  int rank = 0;
  check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  return rank;
}
int comm_size(ncclComm_t comm) {
  int size = 0;
  check(ncclCommCount(comm, &size), "ncclCommCount");
  return size;
}

cudaStream_t new_stream(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

}  // namespace mgpu::comm::nccl

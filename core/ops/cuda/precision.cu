// (being written: fills its entries of the CUDA kernel table; see cuda_kernels.h)
#include "core/ops/cuda/cuda_kernels.h"

namespace mgpu::cuda {

void fill_precision_kernels(CudaKernels&) {}

}  // namespace mgpu::cuda

// The marker of kernel math shared by the CPU and the GPU. A function written once in
// core/ops/math/ and marked MGPU_HD is compiled for the host by the C++ compiler (the CPU
// kernels call it) and for both sides by nvcc (the CUDA kernels call it), so the CPU test suite
// exercises the exact arithmetic a GPU runs. Only indexing and launch configuration are GPU-only.
//
// Headers under core/ops/math/ are included by .cu files, which nvcc compiles as C++17: keep
// them C++17, header-only, free of exceptions, allocation and std:: containers.
#pragma once

#if defined(__CUDACC__)
#define MGPU_HD __host__ __device__ inline
#else
#define MGPU_HD inline
#endif

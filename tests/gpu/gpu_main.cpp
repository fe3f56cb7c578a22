// Main of every GPU test executable: without a usable GPU it prints one line and exits 77, which
// ctest (SKIP_RETURN_CODE 77) reports as "skipped" instead of passed or failed. With a GPU it
// installs the CUDA module, selects the reference exercise tables and runs the Catch2 tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "core/ops/cuda_module.h"
#include "core/runtime/gpu.h"
#include "exercises/exercises.h"
#include "exercises/selection.h"

int main(int argc, char* argv[]) {
  if (!mgpu::cuda::install()) {
    std::printf("no CUDA GPU: skipped (%s)\n", mgpu::cuda::built_with_cuda()
                                                   ? "cudaGetDeviceCount reports none"
                                                   : "this build has no CUDA");
    return 77;
  }
  mgpu::ex::use_seams(mgpu::reference::seams());
  return Catch::Session().run(argc, argv);
}

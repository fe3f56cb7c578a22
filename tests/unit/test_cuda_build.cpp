// The CUDA module's behaviour that can be checked WITHOUT a GPU: after install() the kernel table
// is complete (install fills it before looking for devices), and asking for --device cuda on a
// machine without one is one clear line and exit code 2, not a crash.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "core/ops/cuda_table.h"
#include "core/runtime/gpu.h"
#include "core/tensor/allocator.h"
#include "lessons/cli.h"

using namespace mgpu;

TEST_CASE("install() fills every CUDA kernel entry (CUDA builds)", "[cuda]") {
  const bool has_gpu = cuda::install();
  if (!cuda::built_with_cuda()) {
    CHECK_FALSE(has_gpu);
    CHECK(cuda::device_count() == 0);
    WARN("this build has no CUDA: table check skipped");
    return;
  }
  const CudaKernels& k = cuda_kernels();
  CHECK(k.matmul);
  CHECK(k.bias_add);
  CHECK(k.bias_grad);
  CHECK(k.add);
  CHECK(k.axpy);
  CHECK(k.scale);
  CHECK(k.gelu_forward);
  CHECK(k.gelu_backward);
  CHECK(k.layernorm_forward);
  CHECK(k.layernorm_backward);
  CHECK(k.softmax_forward);
  CHECK(k.softmax_backward);
  CHECK(k.attention_forward);
  CHECK(k.attention_backward);
  CHECK(k.embedding_forward);
  CHECK(k.embedding_backward);
  CHECK(k.cross_entropy_forward_backward);
  CHECK(k.cross_entropy_loss);
  CHECK(k.sgd_momentum);
  CHECK(k.adamw);
  CHECK(k.fill);
  CHECK(k.vocab_parallel_ce_stats);
  CHECK(k.vocab_parallel_ce_forward_backward);
  CHECK(k.attention_block_forward);  // ring attention (context parallelism, ring_attention.cu)
  CHECK(k.attention_block_backward);
  CHECK(k.attention_merge);
  CHECK(k.copy_columns);
  CHECK(k.gather_rows);  // a mixture of experts' permutation (moe_rows.cu)
  CHECK(k.combine_rows);
  CHECK(k.gathered_row_dots);
  CHECK(k.convert);  // the 2-byte storage path (bf16/fp16 on the GPU, precision.cu)
  CHECK(k.count_nonfinite);
  CHECK(k.matmul_2byte);
  // Every entry above, by size: a new entry added to CudaKernels must be added here too.
  CHECK(sizeof(CudaKernels) == 33 * sizeof(void*));
  // And no slot is left empty, whatever its name: the table is a row of function pointers, read
  // here by their bytes (a null pointer is all zero bits on every platform this builds on).
  std::array<std::uintptr_t, sizeof(CudaKernels) / sizeof(std::uintptr_t)> slots{};
  static_assert(sizeof(slots) == sizeof(CudaKernels));
  std::memcpy(slots.data(), &k, sizeof(CudaKernels));
  for (size_t i = 0; i < slots.size(); ++i) {
    INFO("CudaKernels slot " << i << " of " << slots.size());
    CHECK(slots[i] != 0);
  }
  const DeviceMemoryHooks& hooks = device_memory_hooks(DeviceKind::cuda);
  CHECK(hooks.allocate);
  CHECK(hooks.release);
  CHECK(hooks.copy);
}

TEST_CASE("without a GPU, device cuda is one line and exit 2", "[cuda]") {
  if (cuda::install()) {
    WARN("a GPU is present: the no-GPU path is not exercised here");
    return;
  }
  std::ostringstream out, err;
  int code =
      lessons::mgpu_main({"run", "single_device", "--device", "cuda", "--steps", "1"}, out, err);
  INFO("stdout: " << out.str() << "\nstderr: " << err.str());
  CHECK(code == 2);
  const std::string e = err.str();
  CHECK(e.find("--device cuda") != std::string::npos);
  CHECK(std::count(e.begin(), e.end(), '\n') == 1);

  std::ostringstream out2, err2;
  CHECK(lessons::mgpu_main({"calibrate"}, out2, err2) == 2);
  const std::string e2 = err2.str();
  CHECK(std::count(e2.begin(), e2.end(), '\n') == 1);
}

// Emulated CUDA (see cuda_emulation.h): the CUDA kernel table filled with the CPU kernels, each
// wrapped so that its device pointers are translated to the host memory behind them, and memory
// hooks that hand out such device pointers.
#include "core/ops/cuda_emulation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/ops/cpu/kernels.h"
#include "core/ops/cpu/optimizer_loops.h"
#include "core/ops/cpu/precision.h"
#include "core/ops/cuda_table.h"
#include "core/runtime/allocator.h"
#include "core/runtime/dtype.h"

namespace mgpu::cuda {

// A named namespace, not an anonymous one: a unity build may share this file's with others'.
namespace emulated {

std::atomic<bool> g_installed{false};

// An emulated device address is the host address with this bit set. On x86-64 (48-bit or 57-bit
// user space) and on AArch64 (bit 55 selects the kernel's half) such an address is never a
// mapped user address, so a host dereference faults, as it would on a real GPU's pointer. With
// 32-bit addresses (WebAssembly, its memory capped at 2 GiB) bit 31 is never a real address's.
constexpr uintptr_t kDeviceBit = uintptr_t{1} << (sizeof(uintptr_t) == 8 ? 55 : 31);

bool is_device_address(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & kDeviceBit) != 0;
}

// The host memory behind an emulated device pointer; host pointers (token ids, MoE indices and
// scales, the router's dots) pass unchanged.
template <class T>
T on_host(T value) {
  if constexpr (std::is_pointer_v<T>) {
    if (!is_device_address(value)) return value;
    return reinterpret_cast<T>(reinterpret_cast<uintptr_t>(value) & ~kDeviceBit);
  } else {
    return value;
  }
}

// A table entry from a CPU kernel of the same signature: every pointer argument translated.
template <auto Kernel>
struct OnHostMemory;
template <class R, class... Args, R (*Kernel)(Args...)>
struct OnHostMemory<Kernel> {
  static R call(Args... args) { return Kernel(on_host(args)...); }
};

// ---- memory hooks ----

void* allocate(int64_t bytes, int /*device_index*/) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
  void* host = std::aligned_alloc(kAlign, rounded);
  if (!host) throw std::bad_alloc();
  std::memset(host, 0, rounded);  // core's contract: new tensors are zero-filled
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) | kDeviceBit);
}

void release(void* ptr, int /*device_index*/) {
  std::free(on_host(ptr));
}

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memmove(on_host(dst), on_host(src), static_cast<size_t>(bytes));
}

// ---- the entry with no CPU kernel of its own (Tensor::fill does it inline on cpu tensors) ----

void fill(float* x, float value, int64_t count) {
  std::fill(x, x + count, value);
}

CudaKernels emulated_table() {
  CudaKernels t;
  t.matmul = OnHostMemory<&cpu::matmul>::call;
  t.bias_add = OnHostMemory<&cpu::bias_add>::call;
  t.bias_grad = OnHostMemory<&cpu::bias_grad>::call;
  t.add = OnHostMemory<&cpu::add>::call;
  t.axpy = OnHostMemory<&cpu::axpy>::call;
  t.scale = OnHostMemory<&cpu::scale>::call;
  t.gelu_forward = OnHostMemory<&cpu::gelu_forward>::call;
  t.gelu_backward = OnHostMemory<&cpu::gelu_backward>::call;
  t.layernorm_forward = OnHostMemory<&cpu::layernorm_forward>::call;
  t.layernorm_backward = OnHostMemory<&cpu::layernorm_backward>::call;
  t.softmax_forward = OnHostMemory<&cpu::softmax_forward>::call;
  t.softmax_backward = OnHostMemory<&cpu::softmax_backward>::call;
  t.attention_forward = OnHostMemory<&cpu::attention_forward>::call;
  t.attention_backward = OnHostMemory<&cpu::attention_backward>::call;
  t.rmsnorm_forward = OnHostMemory<&cpu::rmsnorm_forward>::call;
  t.rmsnorm_backward = OnHostMemory<&cpu::rmsnorm_backward>::call;
  t.swiglu_forward = OnHostMemory<&cpu::swiglu_forward>::call;
  t.swiglu_backward = OnHostMemory<&cpu::swiglu_backward>::call;
  t.rope_forward = OnHostMemory<&cpu::rope_forward>::call;
  t.rope_backward = OnHostMemory<&cpu::rope_backward>::call;
  t.attention_block_forward = OnHostMemory<&cpu::attention_block_forward>::call;
  t.attention_block_backward = OnHostMemory<&cpu::attention_block_backward>::call;
  t.attention_merge = OnHostMemory<&cpu::attention_merge>::call;
  t.copy_columns = OnHostMemory<&cpu::copy_columns>::call;
  t.gather_rows = OnHostMemory<&cpu::gather_rows>::call;
  t.combine_rows = OnHostMemory<&cpu::combine_rows>::call;
  t.gathered_row_dots = OnHostMemory<&cpu::gathered_row_dots>::call;
  t.embedding_forward = OnHostMemory<&cpu::embedding_forward>::call;
  t.embedding_backward = OnHostMemory<&cpu::embedding_backward>::call;
  t.cross_entropy_forward_backward = OnHostMemory<&cpu::cross_entropy_forward_backward>::call;
  t.cross_entropy_loss = OnHostMemory<&cpu::cross_entropy_loss>::call;
  t.vocab_parallel_ce_stats = OnHostMemory<&cpu::vocab_parallel_ce_stats>::call;
  t.vocab_parallel_ce_forward_backward =
      OnHostMemory<&cpu::vocab_parallel_ce_forward_backward>::call;
  t.sgd_momentum = OnHostMemory<&cpu::sgd_momentum>::call;
  t.adamw = OnHostMemory<&cpu::adamw>::call;
  t.convert = OnHostMemory<&cpu::convert>::call;
  t.count_nonfinite = OnHostMemory<&cpu::count_nonfinite>::call;
  t.matmul_2byte = OnHostMemory<&cpu::matmul_2byte>::call;
  t.fill = OnHostMemory<&fill>::call;
  return t;
}

}  // namespace emulated

bool emulation_requested() {
  const char* value = std::getenv(kEmulationEnv);
  return value && std::string_view(value) != "" && std::string_view(value) != "0";
}

void install_emulation() {
  // Once while installed: a World made while another's ranks run (a lesson's inner run) must not
  // rewrite the table under them.
  static std::mutex installing;
  std::lock_guard lock(installing);
  if (emulated::g_installed) return;
  install_cuda_kernels(emulated::emulated_table());
  set_device_memory_hooks(DeviceKind::cuda,
                          {emulated::allocate, emulated::release, emulated::copy});
  emulated::g_installed = true;
}

bool emulation_installed() {
  return emulated::g_installed;
}

void emulation_uninstalled() {
  emulated::g_installed = false;
}

}  // namespace mgpu::cuda

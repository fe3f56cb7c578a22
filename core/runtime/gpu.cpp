// Stubs for a build without CUDA: every query says "no GPU". With CUDA, core/runtime/cuda/
// provides the real functions and this file compiles to nothing.
#include "core/runtime/gpu.h"

#ifndef MGPU_HAVE_CUDA
#include <stdexcept>

namespace mgpu::cuda {

bool built_with_cuda() {
  return false;
}
int device_count() {
  return 0;
}
std::string device_name(int) {
  return "";
}
MemInfo memory_info(int) {
  return {};
}
void synchronize() {}
Mark record_mark() {
  return nullptr;
}
void wait_for(Mark) {}
double seconds_between(Mark, Mark) {
  return 0;
}
void release_mark(Mark) {}
int64_t cached_bytes() {
  return 0;
}
void release_cached() {}

}  // namespace mgpu::cuda
#endif

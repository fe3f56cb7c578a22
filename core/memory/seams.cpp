// Storage for the memory estimator seams (see seams.h).
#include "core/memory/seams.h"

#include "core/runtime/seam.h"

namespace mgpu::memory {

void install_memory_seams(MemorySeams seams) {
  Seam<MemorySeams>::install(std::move(seams));
}

const MemorySeams& memory_seams() {
  return Seam<MemorySeams>::get("memory seam",
                                Required{"gpt_param_count", &MemorySeams::gpt_param_count},
                                Required{"estimate_memory", &MemorySeams::estimate_memory});
}

}  // namespace mgpu::memory

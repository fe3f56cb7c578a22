#include "core/runtime/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace mgpu {

int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

int processes_on_this_host() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* text = std::getenv(var)) {
      const long n = std::strtol(text, nullptr, 10);
      if (n >= 1 && n <= 1 << 20) return static_cast<int>(n);
    }
  return 1;
}

int64_t host_memory_budget(int64_t available) {
  return available < 0 ? available : available / 4 * 3;
}

int64_t cpu_rank_capacity(int64_t capacity, int ranks, int64_t available) {
  if (available < 0) return capacity;
  // A quarter stays for what the allocator does not see (data, gathers, the program itself).
  const int64_t share = host_memory_budget(available) / std::max(1, ranks);
  return capacity > 0 ? std::min(capacity, share) : share;
}

}  // namespace mgpu

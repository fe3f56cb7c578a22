// The host's memory, for the cpu device: its virtual GPUs allocate real host memory, so a rank's
// capacity is never more than its share of what the host has available. An oversized run then
// stops with the allocator's out-of-memory breakdown, before the kernel's OOM killer ends it.
#pragma once
#include <cstdint>

namespace mgpu {

// MemAvailable from /proc/meminfo (free pages + reclaimable cache), or -1 when unknown.
int64_t host_available_bytes();

// `capacity` (0 = unlimited) capped at 1/`ranks` of 3/4 of `available` (-1 = unknown: no cap).
int64_t cpu_rank_capacity(int64_t capacity, int ranks, int64_t available);

}  // namespace mgpu

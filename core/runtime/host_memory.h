// The host's memory, for the cpu device: its virtual GPUs allocate real host memory, so a rank's
// capacity is never more than its share of what the host has available. An oversized run then
// stops with the allocator's out-of-memory breakdown, before the kernel's OOM killer ends it.
#pragma once
#include <cstdint>

namespace mgpu {

// MemAvailable from /proc/meminfo (free pages + reclaimable cache), or -1 when unknown.
int64_t host_available_bytes();

// What this process may plan to use of `available` (-1 = unknown, returned as is): 3/4 of it, a
// quarter staying for what no estimate sees (the program itself, the page cache it needs).
int64_t host_memory_budget(int64_t available);

// `capacity` (0 = unlimited) capped at 1/`ranks` of the host's budget (-1 = unknown: no cap).
int64_t cpu_rank_capacity(int64_t capacity, int ranks, int64_t available);

}  // namespace mgpu

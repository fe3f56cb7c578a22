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

// How many processes of this job share this host: under mpirun the node-local size its launcher
// sets (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS), else 1. Each of them
// holds its own rank's memory, so one process may plan for 1/that of the host.
int processes_on_this_host();

// `capacity` (0 = unlimited) capped at 1/`ranks` of the host's budget (-1 = unknown: no cap).
int64_t cpu_rank_capacity(int64_t capacity, int ranks, int64_t available);

}  // namespace mgpu

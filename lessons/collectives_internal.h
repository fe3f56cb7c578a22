// What the collectives lesson's files share (collectives.cpp, collectives_check.cpp,
// collectives_mpi.cpp).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/world/world.h"

namespace mgpu::lessons {

// Under mpirun: the lesson's ring all-reduce against MPI_Allreduce (collectives_mpi.cpp).
void race_mpi_allreduce(World& world, const std::vector<int64_t>& counts, int iters,
                        std::ostream& out);

namespace detail {

// Runs one collective on this rank and checks the result against the serial answer
// (collectives_check.cpp).
bool run_and_check(comm::Comm& comm, const std::string& kind, int64_t n);
// A buffer size for the tables: "4 MiB", "16 KiB", or bytes when not round (collectives.cpp).
std::string format_size(int64_t bytes);

}  // namespace detail

}  // namespace mgpu::lessons

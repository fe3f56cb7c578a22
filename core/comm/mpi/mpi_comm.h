// The MPI backend: one rank per process, CPU tensors; the local backend's collective algorithms
// on MPI point-to-point, behind the Comm interface. Built only when MPI is found (MGPU_HAVE_MPI);
// MPI_Init happens only when a World with backend mpi is made (i.e. under mpirun), so normal
// binaries never start MPI.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/all_reduce_fn.h"
#include "core/runtime/context.h"
#include "core/runtime/trace_event.h"

namespace mgpu::comm::mpi {

struct Process {
  int rank = 0;
  int size = 1;
};
// MPI_Init_thread once per process (MPI_Finalize at exit); returns this process's rank and size.
Process init_process();

// This process's rank function raised `what`. When the process finishes (after printing its
// error) it tells the others, whose waits then end the job at once with this error as the
// headline of the "who waits for whom" table, instead of after the comm timeout.
void note_failure(const std::string& what);

// The world communicator; it and every group split from it run `all_reduce` as their all-reduce.
std::unique_ptr<Comm> make_world_comm(RankContext& ctx, double timeout_seconds,
                                      AllReduceFn all_reduce);

// Open MPI's own MPI_Allreduce (sum, in place) over an mpi-backend comm's processes: untraced,
// off the modeled clock. The collectives lesson races the ring against it; everything else runs
// the ring (so results equal the thread run's bit for bit).
void library_all_reduce(Comm& comm, Tensor& t);

// The start-up agreement (World's run configuration): empty when every process passed the same
// `mine`, else every process's, by world rank. One small all-reduce of a hash when they agree;
// the strings are gathered only when they do not. A process that never arrives is diagnosed
// after `timeout` seconds like any stuck wait.
std::vector<std::string> world_strings_if_different(const std::string& mine, double timeout);

// Gathers every process's events and counters into `root_out` on rank 0 (as JSON strings).
void gather_trace_to_root(const trace::Trace& mine, trace::Trace& root_out);

}  // namespace mgpu::comm::mpi

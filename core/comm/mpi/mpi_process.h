// The MPI backend's process-level pieces that its communicator uses (mpi_process.cpp): MPI error
// codes as CommErrors, the diagnosis channel, and the wait every MPI request is completed with.
#pragma once
#include <mpi.h>

#include <string>

namespace mgpu::comm::mpi {

// Throws CommError "`what` failed (MPI error N)" unless `code` is MPI_SUCCESS.
void check(int code, const char* what);

// The private duplicate of the world communicator the "who waits for whom" questions use; made
// once, with the world communicator.
void open_diagnosis_channel();

// Polls until `req` completes, answering the others' questions meanwhile; past `timeout` seconds
// (or a short grace after another rank's failure notice) prints the "who waits for whom" table
// and ends the job. `what` completes "rank 2 waits ...". Returns MPI_Test's code: MPI_SUCCESS, or
// the request's error (MPI_ERR_TRUNCATE: a message larger than the posted buffer), which the
// caller turns into a diagnosis.
int wait_request(MPI_Request& req, MPI_Status& status, const std::string& what, double timeout);

}  // namespace mgpu::comm::mpi

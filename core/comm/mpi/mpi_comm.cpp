// The MPI backend: each process is one rank. This file is its point-to-point layer; the
// collectives are the shared algorithms every backend runs (AlgorithmicComm: the ring all-reduce
// it was given, the rings, the tree, the pairwise all-to-all, all on this Comm's send/recv), so a
// run under mpirun sums in the same order, sends the same messages and, on the modeled clock,
// draws the same timeline as the thread run, bit for bit. Messages a collective sends travel on a
// private duplicate of the communicator, apart from user p2p.
// MPI_Allreduce itself is kept for the collectives lesson's race (library_all_reduce).
//
// Faults: every wait polls through wait_request (mpi_process.h), which past the comm timeout
// prints the "who waits for whom" table and ends the job. Before each collective the members
// compare a hash of their call (folded into one small all-reduce); on a difference they gather
// the calls and every member raises the local backend's mismatch table. On the modeled clock
// every message carries its send time in a small header, as in the local backend's mailboxes.
#include "core/comm/mpi/mpi_comm.h"

#include <mpi.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/mpi/mpi_comm_internal.h"
#include "core/comm/mpi/mpi_process.h"

namespace mgpu::comm::mpi {

namespace {

float* host_floats(Tensor& t) {
  return t.has_data() && t.numel() > 0 ? t.f32() : nullptr;
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

// The members' ranks in MPI_COMM_WORLD, in `comm`'s rank order.
std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(comm, &group);
  std::vector<int> mine(size), world(size);
  for (int i = 0; i < size; ++i) mine[i] = i;
  MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

}  // namespace

namespace detail {

MpiComm::MpiComm(MPI_Comm comm, RankContext& ctx, std::string name, double timeout,
                 AllReduceFn all_reduce)
    : AlgorithmicComm(ctx, std::move(name), world_ranks_of(comm), rank_in(comm),
                      std::move(all_reduce)),
      comm_(comm),
      timeout_(timeout) {
  MPI_Comm_dup(comm_, &collective_comm_);
}

MpiComm::~MpiComm() {
  MPI_Comm_free(&collective_comm_);
  if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

// Open MPI's own all-reduce on this group's buffers (the collectives lesson races the ring
// against it): untraced and off the modeled clock, but still a wait the watchdog can diagnose.
void MpiComm::library_all_reduce(Tensor& t) {
  MPI_Request req;
  check(MPI_Iallreduce(MPI_IN_PLACE, host_floats(t), static_cast<int>(t.numel()), MPI_FLOAT,
                       MPI_SUM, comm_, &req),
        "MPI_Iallreduce");
  wait(req, fmt::format("in MPI_Allreduce of group {}", name()));
}

void MpiComm::send(const Tensor& t, int dst, int tag) {
  send_now(payload(t), t.bytes(), dst, tag);
}
void MpiComm::recv(Tensor& t, int src, int tag) {
  PostedRecv posted = post_recv(t, src, tag);
  compute_waits_for(finish_recv(posted));
}
// Host messages: their bytes, as they are.
void MpiComm::send_host(const HostMessage& m, int dst, int tag) {
  send_now(m.data, m.bytes(), dst, tag);
}
void MpiComm::recv_host(const HostMessage& m, int src, int tag) {
  PostedRecv posted = post_recv(m.data, m.bytes(), src, tag);
  compute_waits_for(finish_recv(posted));
}
// Adds straight from the message buffer MPI received into: no temporary tensor, the same sum.
void MpiComm::recv_reduce(Tensor& accumulate, int src, int tag) {
  if (accumulate.dtype() != DType::f32) return Comm::recv_reduce(accumulate, src, tag);
  PostedRecv posted = post_recv(accumulate, src, tag);
  posted.accumulate = true;
  compute_waits_for(finish_recv(posted));
}
// The message (a copy with its header) is handed to MPI now; wait() completes the request, so
// every rank can post its send before any of them blocks in a recv (the ring pattern).
Work MpiComm::isend(const Tensor& t, int dst, int tag) {
  return on_wait([this, posted = post(payload(t), t.bytes(), dst, tag)]() mutable {
    wait(posted.request, posted.what);
    compute_waits_for(posted.end);
  });
}
// Posted now, so irecvs match messages in the order they were posted (as in the local backend).
Work MpiComm::irecv(Tensor& t, int src, int tag) {
  return on_wait([this, posted = post_recv(t, src, tag)]() mutable {
    compute_waits_for(finish_recv(posted));
  });
}

std::unique_ptr<Comm> MpiComm::split(int color, int key, const std::string& name) {
  next_seq();  // split() is one of the group's collectives, numbered as the local backend does
  MPI_Comm sub;
  check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiComm>(sub, ctx(),
                                   name.empty() ? fmt::format("{}.{}", this->name(), color) : name,
                                   timeout_, all_reduce_algorithm());
}

// Polls until `req` completes; past the timeout, names this rank and what it waited for.
// `what` completes "rank 2 waits ..." in the table: "for recv from rank 1 (tag 7) in group
// world", "in all_reduce #3 of group world: all_reduce(count=4, f32, sum) (recv from rank 1)".
void MpiComm::wait(MPI_Request& req, const std::string& what) {
  MPI_Status status;
  check(wait_request(req, status, what, timeout_), "MPI_Test");
}

}  // namespace detail

using detail::MpiComm;

std::unique_ptr<Comm> make_world_comm(RankContext& ctx, double timeout_seconds,
                                      AllReduceFn all_reduce) {
  open_diagnosis_channel();
  return std::make_unique<MpiComm>(MPI_COMM_WORLD, ctx, "world", timeout_seconds,
                                   std::move(all_reduce));
}

void library_all_reduce(Comm& comm, Tensor& t) {
  auto* mpi = dynamic_cast<MpiComm*>(&comm);
  if (!mpi)
    throw std::logic_error("library_all_reduce needs a Comm of the mpi backend, not " +
                           comm.backend());
  mpi->library_all_reduce(t);
}

}  // namespace mgpu::comm::mpi

// A message of the MPI backend on its way: the channel it travels on, the header with the
// sender's modeled time, posting a send or a receive, and a receive's completion and size check.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithms.h"
#include "core/comm/mpi/mpi_comm_internal.h"
#include "core/comm/mpi/mpi_process.h"

namespace mgpu::comm::mpi::detail {

std::string MpiComm::describe_wait(const char* direction, int peer, int tag) const {
  return in_collective() ? fmt::format("{} ({} rank {})", label_, direction, world_rank(peer))
                         : fmt::format("for {} rank {} (tag {}) in group {}", direction,
                                       world_rank(peer), tag, name());
}

void MpiComm::send_now(const void* data, int64_t bytes, int dst, int tag) {
  PostedSend posted = post(data, bytes, dst, tag);
  wait(posted.request, posted.what);
  compute_waits_for(posted.end);
}

// Header: the sender's modeled issue time, then the payload (`bytes` at `data`; a phantom
// tensor's none, though it counts its bytes). This is the one place bytes leave a rank, so it
// is where they are counted for the trace.
MpiComm::PostedSend MpiComm::post(const void* data, int64_t bytes, int dst, int tag) {
  check_peer(dst, "send to");
  RankClock& clock = ctx().clock;
  double sent = clock.comm_issue_time();
  std::vector<char> buffer(sizeof(double) + static_cast<size_t>(data ? bytes : 0));
  std::memcpy(buffer.data(), &sent, sizeof(double));
  if (data && bytes > 0)
    std::memcpy(buffer.data() + sizeof(double), data, static_cast<size_t>(bytes));
  PostedSend posted;
  posted.buffer = std::move(buffer);
  posted.what = describe_wait("send to", dst, tag);
  check(MPI_Isend(posted.buffer.data(), static_cast<int>(posted.buffer.size()), MPI_BYTE, dst, tag,
                  channel(), &posted.request),
        "MPI_Isend");
  double transfer = ctx().profile.transfer_time(my_world_rank(), world_rank(dst), bytes);
  posted.end = clock.modeled() ? sent + transfer : clock.wall_now();
  clock.wait_comm_until(posted.end);
  count_sent(bytes);
  record_p2p("send", dst, bytes, bytes, sent, posted.end);
  return posted;
}

MpiComm::PostedRecv MpiComm::post_recv(Tensor& t, int src, int tag) {
  PostedRecv p = post_recv(payload(t), t.bytes(), src, tag);
  p.keep = t;
  return p;
}
MpiComm::PostedRecv MpiComm::post_recv(void* target, int64_t bytes, int src, int tag) {
  check_peer(src, "recv from");
  PostedRecv p;
  p.posted = ctx().clock.comm_issue_time();
  p.buffer.resize(sizeof(double) + static_cast<size_t>(target ? bytes : 0));
  p.what = describe_wait("recv from", src, tag);
  p.target = target;
  p.bytes = bytes;
  p.src = src;
  p.tag = tag;
  check(MPI_Irecv(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_BYTE, src, tag, channel(),
                  &p.request),
        "MPI_Irecv");
  return p;
}

// Receive ends at max(posted, sent + transfer), as in the local backend's mailboxes.
double MpiComm::finish_recv(PostedRecv& p) {
  check_received_size(p, wait_request(p.request, p.status, p.what, timeout_));
  double sent;
  std::memcpy(&sent, p.buffer.data(), sizeof(double));
  const char* message = p.buffer.data() + sizeof(double);
  if (p.target && p.bytes > 0 && p.accumulate)
    algorithms::add_floats(static_cast<float*>(p.target), reinterpret_cast<const float*>(message),
                           p.bytes / static_cast<int64_t>(sizeof(float)));
  else if (p.target && p.bytes > 0)
    std::memcpy(p.target, message, static_cast<size_t>(p.bytes));
  const double transfer = ctx().profile.transfer_time(world_rank(p.src), my_world_rank(), p.bytes);
  // Each process's wall clock counts from its own start: a sender's stamp is not comparable.
  return receive_ends(p.src, p.bytes, p.posted, sent, transfer, /*sent_on_my_clock=*/false);
}

// A message of another size than the posted buffer is the local backend's error, word for
// word: larger ones MPI truncates (MPI_ERR_TRUNCATE, returned since the world communicator's
// error handler is MPI_ERRORS_RETURN), smaller ones MPI_Get_count measures.
void MpiComm::check_received_size(PostedRecv& p, int code) {
  const int64_t holds = static_cast<int64_t>(p.buffer.size() - sizeof(double));
  int error_class = MPI_SUCCESS;
  if (code != MPI_SUCCESS) MPI_Error_class(code, &error_class);
  if (error_class == MPI_ERR_TRUNCATE)
    throw CommError(fmt::format(
        "rank {} received more than {} bytes from rank {} (tag {}) in group {}, but its buffer "
        "holds {}",
        my_world_rank(), holds, world_rank(p.src), p.tag, name(), holds));
  check(code, "MPI_Test");
  int count = 0;
  MPI_Get_count(&p.status, MPI_BYTE, &count);
  if (count != static_cast<int>(p.buffer.size()))
    throw CommError(fmt::format(
        "rank {} received {} bytes from rank {} (tag {}) in group {}, but its buffer holds {}",
        my_world_rank(), std::max<int64_t>(0, count - int64_t{sizeof(double)}), world_rank(p.src),
        p.tag, name(), holds));
}

}  // namespace mgpu::comm::mpi::detail

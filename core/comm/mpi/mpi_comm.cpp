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

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithmic_comm.h"
#include "core/comm/algorithms/algorithms.h"
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

// The point-to-point layer over MPI; the collectives are AlgorithmicComm's.
class MpiComm final : public AlgorithmicComm {
 public:
  MpiComm(MPI_Comm comm, RankContext& ctx, std::string name, double timeout, AllReduceFn all_reduce)
      : AlgorithmicComm(ctx, std::move(name), world_ranks_of(comm), rank_in(comm),
                        std::move(all_reduce)),
        comm_(comm),
        timeout_(timeout) {
    MPI_Comm_dup(comm_, &collective_comm_);
  }
  ~MpiComm() override {
    MPI_Comm_free(&collective_comm_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  std::string backend() const override { return "mpi"; }

  // Open MPI's own all-reduce on this group's buffers (the collectives lesson races the ring
  // against it): untraced and off the modeled clock, but still a wait the watchdog can diagnose.
  void library_all_reduce(Tensor& t) {
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, host_floats(t), static_cast<int>(t.numel()), MPI_FLOAT,
                         MPI_SUM, comm_, &req),
          "MPI_Iallreduce");
    wait(req, fmt::format("in MPI_Allreduce of group {}", name()));
  }

  // ---- point-to-point ----
  void send(const Tensor& t, int dst, int tag) override {
    send_now(payload(t), t.bytes(), dst, tag);
  }
  void recv(Tensor& t, int src, int tag) override {
    PostedRecv posted = post_recv(t, src, tag);
    compute_waits_for(finish_recv(posted));
  }
  // Host messages: their bytes, as they are.
  void send_host(const HostMessage& m, int dst, int tag) override {
    send_now(m.data, m.bytes(), dst, tag);
  }
  void recv_host(const HostMessage& m, int src, int tag) override {
    PostedRecv posted = post_recv(m.data, m.bytes(), src, tag);
    compute_waits_for(finish_recv(posted));
  }
  // Adds straight from the message buffer MPI received into: no temporary tensor, the same sum.
  void recv_reduce(Tensor& accumulate, int src, int tag) override {
    if (accumulate.dtype() != DType::f32) return Comm::recv_reduce(accumulate, src, tag);
    PostedRecv posted = post_recv(accumulate, src, tag);
    posted.accumulate = true;
    compute_waits_for(finish_recv(posted));
  }
  // The message (a copy with its header) is handed to MPI now; wait() completes the request, so
  // every rank can post its send before any of them blocks in a recv (the ring pattern).
  Work isend(const Tensor& t, int dst, int tag) override {
    return on_wait([this, posted = post(payload(t), t.bytes(), dst, tag)]() mutable {
      wait(posted.request, posted.what);
      compute_waits_for(posted.end);
    });
  }
  // Posted now, so irecvs match messages in the order they were posted (as in the local backend).
  Work irecv(Tensor& t, int src, int tag) override {
    return on_wait([this, posted = post_recv(t, src, tag)]() mutable {
      compute_waits_for(finish_recv(posted));
    });
  }

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
    next_seq();  // split() is one of the group's collectives, numbered as the local backend does
    MPI_Comm sub;
    check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(
        sub, ctx(), name.empty() ? fmt::format("{}.{}", this->name(), color) : name, timeout_,
        all_reduce_algorithm());
  }

 private:
  // Polls until `req` completes; past the timeout, names this rank and what it waited for.
  // `what` completes "rank 2 waits ..." in the table: "for recv from rank 1 (tag 7) in group
  // world", "in all_reduce #3 of group world: all_reduce(count=4, f32, sum) (recv from rank 1)".
  void wait(MPI_Request& req, const std::string& what) {
    MPI_Status status;
    check(wait_request(req, status, what, timeout_), "MPI_Test");
  }

  // Every member hashes its call; one all-reduce of {hash, -hash} (max) tells whether all hashes
  // agree. If not, the members gather their calls and all raise the same table the local backend
  // raises. (It moves no modeled time: the local backend's check is free too.)
  void agree_on_call(int64_t seq, const CollectiveCall& collective) override {
    const std::string call = collective.describe();
    label_ = fmt::format("in {} #{} of group {}: {}", collective.kind, seq, name(), call);
    const double hash = static_cast<double>(std::hash<std::string>{}(call) & ((1ull << 52) - 1));
    double mine[2] = {hash, -hash}, all[2];
    MPI_Request req;
    check(MPI_Iallreduce(mine, all, 2, MPI_DOUBLE, MPI_MAX, comm_, &req), "MPI_Iallreduce");
    wait(req, label_);
    if (all[0] == -all[1]) return;
    constexpr int kWidth = 120;
    std::vector<char> calls(static_cast<size_t>(kWidth) * size(), '\0');
    std::vector<char> my_call(kWidth, '\0');
    std::memcpy(my_call.data(), call.data(), std::min<size_t>(call.size(), kWidth - 1));
    check(MPI_Iallgather(my_call.data(), kWidth, MPI_CHAR, calls.data(), kWidth, MPI_CHAR, comm_,
                         &req),
          "MPI_Iallgather");
    wait(req, label_);
    std::string message = fmt::format("collective #{} in group {} does not match:", seq, name());
    for (int r = 0; r < size(); ++r)
      message += fmt::format("{} rank {} called {}", r ? ";" : "", world_rank(r),
                             std::string(calls.data() + static_cast<size_t>(r) * kWidth));
    throw CommError(message);
  }

  // all_to_all_v: the members all-gather their send and recv counts (off the modeled clock, as
  // the call's agreement) and each checks every pair, so a mismatch raises the same CommError on
  // every member, as on the local backend.
  void agree_on_counts(int64_t seq, std::span<const int64_t> send_counts,
                       std::span<const int64_t> recv_counts) override {
    const int n = size();
    std::vector<int64_t> mine(send_counts.begin(), send_counts.end());
    mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
    std::vector<int64_t> all(static_cast<size_t>(2) * n * n);
    MPI_Request req;
    check(MPI_Iallgather(mine.data(), 2 * n, MPI_INT64_T, all.data(), 2 * n, MPI_INT64_T, comm_,
                         &req),
          "MPI_Iallgather");
    wait(req, label_ + " (its counts)");
    std::vector<int64_t> send, recv;
    for (int r = 0; r < n; ++r) {
      auto member = all.begin() + static_cast<ptrdiff_t>(2) * n * r;
      send.insert(send.end(), member, member + n);
      recv.insert(recv.end(), member + n, member + 2 * n);
    }
    check_all_to_all_v_counts(send, recv, n, members(), name(), seq);
  }

  // Inside a collective its messages go on the private duplicate, never meeting user p2p.
  MPI_Comm channel() const { return in_collective() ? collective_comm_ : comm_; }

  std::string describe_wait(const char* direction, int peer, int tag) const {
    return in_collective() ? fmt::format("{} ({} rank {})", label_, direction, world_rank(peer))
                           : fmt::format("for {} rank {} (tag {}) in group {}", direction,
                                         world_rank(peer), tag, name());
  }

  // A send handed to MPI: the buffer must live until the request completes.
  struct PostedSend {
    std::vector<char> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
    std::string what;
    double end = 0;  // when the transfer ends on this rank's clock
  };
  struct PostedRecv {
    std::vector<char> buffer;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Status status{};
    std::string what;
    void* target = nullptr;  // where the payload goes (null: a phantom tensor's, nowhere)
    int64_t bytes = 0;       // the message's size (a phantom tensor's too)
    Tensor keep;             // a tensor target's storage, alive until the receive completes
    int src = 0, tag = 0;
    double posted = 0;        // when the receive was posted on this rank's clock
    bool accumulate = false;  // recv_reduce: add the payload into target instead of copying
  };

  // A tensor's values (none for phantom tensors, which have shapes but no data).
  static const void* payload(const Tensor& t) { return t.has_data() ? t.raw() : nullptr; }
  static void* payload(Tensor& t) { return t.has_data() ? t.raw() : nullptr; }

  void send_now(const void* data, int64_t bytes, int dst, int tag) {
    PostedSend posted = post(data, bytes, dst, tag);
    wait(posted.request, posted.what);
    compute_waits_for(posted.end);
  }

  // Header: the sender's modeled issue time, then the payload (`bytes` at `data`; a phantom
  // tensor's none, though it counts its bytes). This is the one place bytes leave a rank, so it
  // is where they are counted for the trace.
  PostedSend post(const void* data, int64_t bytes, int dst, int tag) {
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
    check(MPI_Isend(posted.buffer.data(), static_cast<int>(posted.buffer.size()), MPI_BYTE, dst,
                    tag, channel(), &posted.request),
          "MPI_Isend");
    double transfer = ctx().profile.transfer_time(my_world_rank(), world_rank(dst), bytes);
    posted.end = clock.modeled() ? sent + transfer : clock.wall_now();
    clock.wait_comm_until(posted.end);
    count_sent(bytes);
    record_p2p("send", dst, bytes, bytes, sent, posted.end);
    return posted;
  }

  PostedRecv post_recv(Tensor& t, int src, int tag) {
    PostedRecv p = post_recv(payload(t), t.bytes(), src, tag);
    p.keep = t;
    return p;
  }
  PostedRecv post_recv(void* target, int64_t bytes, int src, int tag) {
    check_peer(src, "recv from");
    PostedRecv p;
    p.posted = ctx().clock.comm_issue_time();
    p.buffer.resize(sizeof(double) + static_cast<size_t>(target ? bytes : 0));
    p.what = describe_wait("recv from", src, tag);
    p.target = target;
    p.bytes = bytes;
    p.src = src;
    p.tag = tag;
    check(MPI_Irecv(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_BYTE, src, tag,
                    channel(), &p.request),
          "MPI_Irecv");
    return p;
  }

  // Receive ends at max(posted, sent + transfer), as in the local backend's mailboxes.
  double finish_recv(PostedRecv& p) {
    check_received_size(p, wait_request(p.request, p.status, p.what, timeout_));
    double sent;
    std::memcpy(&sent, p.buffer.data(), sizeof(double));
    const char* message = p.buffer.data() + sizeof(double);
    if (p.target && p.bytes > 0 && p.accumulate)
      algorithms::add_floats(static_cast<float*>(p.target), reinterpret_cast<const float*>(message),
                             p.bytes / static_cast<int64_t>(sizeof(float)));
    else if (p.target && p.bytes > 0)
      std::memcpy(p.target, message, static_cast<size_t>(p.bytes));
    const double transfer =
        ctx().profile.transfer_time(world_rank(p.src), my_world_rank(), p.bytes);
    // Each process's wall clock counts from its own start: a sender's stamp is not comparable.
    return receive_ends(p.src, p.bytes, p.posted, sent, transfer, /*sent_on_my_clock=*/false);
  }

  // A message of another size than the posted buffer is the local backend's error, word for
  // word: larger ones MPI truncates (MPI_ERR_TRUNCATE, returned since the world communicator's
  // error handler is MPI_ERRORS_RETURN), smaller ones MPI_Get_count measures.
  void check_received_size(PostedRecv& p, int code) {
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

  MPI_Comm comm_;
  MPI_Comm collective_comm_ = MPI_COMM_NULL;  // the collectives' own messages
  double timeout_;
  std::string label_;  // the running collective, as the wait table prints it
};

}  // namespace

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

// Internal to core/comm/mpi/mpi_comm*.cpp: the MPI backend's communicator. Its calls are in
// mpi_comm.cpp, a message's way over MPI in mpi_comm_messages.cpp, and the members' agreement
// on each collective in mpi_comm_agreement.cpp.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/comm/algorithms/algorithmic_comm.h"

namespace mgpu::comm::mpi::detail {

// The point-to-point layer over MPI; the collectives are AlgorithmicComm's.
class MpiComm final : public AlgorithmicComm {
 public:
  MpiComm(MPI_Comm comm, RankContext& ctx, std::string name, double timeout,
          AllReduceFn all_reduce);
  ~MpiComm() override;

  std::string backend() const override { return "mpi"; }

  void library_all_reduce(Tensor& t);

  // ---- point-to-point ----
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  void send_host(const HostMessage& m, int dst, int tag) override;
  void recv_host(const HostMessage& m, int src, int tag) override;
  void recv_reduce(Tensor& accumulate, int src, int tag) override;
  Work isend(const Tensor& t, int dst, int tag) override;
  Work irecv(Tensor& t, int src, int tag) override;

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override;

 private:
  void wait(MPI_Request& req, const std::string& what);

  // The members' agreement on a collective (mpi_comm_agreement.cpp).
  void agree_on_call(int64_t seq, const CollectiveCall& collective) override;
  void agree_on_counts(int64_t seq, std::span<const int64_t> send_counts,
                       std::span<const int64_t> recv_counts) override;

  // Inside a collective its messages go on the private duplicate, never meeting user p2p.
  MPI_Comm channel() const { return in_collective() ? collective_comm_ : comm_; }

  // A message's way over MPI (mpi_comm_messages.cpp).
  std::string describe_wait(const char* direction, int peer, int tag) const;

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

  void send_now(const void* data, int64_t bytes, int dst, int tag);
  PostedSend post(const void* data, int64_t bytes, int dst, int tag);
  PostedRecv post_recv(Tensor& t, int src, int tag);
  PostedRecv post_recv(void* target, int64_t bytes, int src, int tag);
  double finish_recv(PostedRecv& p);
  void check_received_size(PostedRecv& p, int code);

  MPI_Comm comm_;
  MPI_Comm collective_comm_ = MPI_COMM_NULL;  // the collectives' own messages
  double timeout_;
  std::string label_;  // the running collective, as the wait table prints it
};

}  // namespace mgpu::comm::mpi::detail

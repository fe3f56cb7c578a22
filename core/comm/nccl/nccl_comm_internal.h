// Internal to core/comm/nccl/nccl_comm*.cpp: the NCCL backend's communicator. Its point-to-point,
// split and waits are in nccl_comm.cpp, its collectives in nccl_comm_collectives.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/nccl/nccl_calls.h"
#include "core/comm/nccl/nccl_timeline.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::comm::nccl::detail {

class NcclComm final : public Comm {
 public:
  // `key`: the same on every member, unique to the group (its IssueBoard's key).
  NcclComm(ncclComm_t comm, RankContext* ctx, std::string name, std::vector<int> world_ranks,
           double timeout, std::string key);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int group_rank) const override { return world_ranks_.at(group_rank); }
  std::string name() const override { return name_; }
  std::string backend() const override { return "nccl"; }

  void send(const Tensor& t, int dst, int /*tag*/) override;
  void recv(Tensor& t, int src, int /*tag*/) override;
  Work isend(const Tensor& t, int dst, int /*tag*/) override;
  Work irecv(Tensor& t, int src, int /*tag*/) override;

  // The collectives (nccl_comm_collectives.cpp).
  void all_reduce(Tensor& t, ReduceOp op) override;
  Work all_reduce_async(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  Work all_gather_async(const Tensor& in, Tensor& out) override;
  void all_to_all(const Tensor& in, Tensor& out) override;
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override;

 private:
  // The comm stream, after making it wait (on the GPU) for the kernels this rank has queued on
  // its compute stream: a collective must read the finished gradients, not half-written ones.
  cudaStream_t ready() { return mgpu::cuda::comm_ready_stream(stream_); }

  // Enqueues an operation between the timeline's marks.
  template <class Enqueue>
  TimedOp timed(trace::Event e, double modeled_seconds, Enqueue enqueue) {
    cudaStream_t stream = ready();
    TimedOp op = timeline_.begin(std::move(e), modeled_seconds);
    enqueue(stream);
    timeline_.enqueued(op);
    return op;
  }
  void blocking(TimedOp op, const std::string& what);
  Work pending(TimedOp op, std::string what);

  void send_part(const Tensor& t, int peer, cudaStream_t stream);
  void recv_part(Tensor t, int peer, cudaStream_t stream);  // t: a view of the target
  TimedOp enqueue_send(const Tensor& t, int dst);
  TimedOp enqueue_recv(Tensor& t, int src);
  // The collectives' enqueue steps (nccl_comm_collectives.cpp).
  TimedOp enqueue_all_reduce(Tensor& t, ReduceOp op);
  void check_divisible(const char* op, int64_t n) const;
  TimedOp enqueue_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op);
  TimedOp enqueue_all_gather(const Tensor& in, Tensor& out);

  void synchronize(const std::string& what);

  ncclComm_t comm_;
  RankContext* ctx_;
  std::string name_;
  std::vector<int> world_ranks_;
  double timeout_;
  int rank_, size_;
  cudaStream_t stream_;
  std::string key_;
  CommTimeline timeline_;
};

}  // namespace mgpu::comm::nccl::detail

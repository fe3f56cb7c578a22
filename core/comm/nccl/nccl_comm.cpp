// NCCL backend: CUDA tensors, one GPU per rank, every operation enqueued on this rank's comm
// stream. Blocking calls synchronize that stream (polling, so a stuck collective becomes a
// timeout naming the rank instead of a hang); the async forms return a Work that does.
// Traced like the other backends: each operation records one event (op, bytes, group, seq or
// peer) whose sent_bytes follow the shared algorithms' rule (algorithms/sent_bytes.h) and whose
// times come from the run's clock (nccl_timeline.h).
#include "core/comm/nccl/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/nccl/nccl_calls.h"
#include "core/comm/nccl/nccl_comm_internal.h"

namespace mgpu::comm::nccl {

namespace detail {

NcclComm::NcclComm(ncclComm_t comm, RankContext* ctx, std::string name,
                   std::vector<int> world_ranks, double timeout, std::string key)
    : comm_(comm),
      ctx_(ctx),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      timeout_(timeout),
      rank_(user_rank(comm)),
      size_(static_cast<int>(world_ranks_.size())),
      stream_(new_stream(ctx->device.index)),
      key_(std::move(key)),
      timeline_(*ctx, stream_, name_, world_ranks_, rank_, key_, timeout) {}

NcclComm::~NcclComm() {
  cudaStreamDestroy(stream_);
  ncclCommDestroy(comm_);
}

// NCCL orders messages per pair by call order; tags are not needed.
void NcclComm::send(const Tensor& t, int dst, int /*tag*/) {
  blocking(enqueue_send(t, dst), fmt::format("send to rank {}", dst));
}
void NcclComm::recv(Tensor& t, int src, int /*tag*/) {
  blocking(enqueue_recv(t, src), fmt::format("recv from rank {}", src));
}
Work NcclComm::isend(const Tensor& t, int dst, int /*tag*/) {
  return pending(enqueue_send(t, dst), "isend");
}
Work NcclComm::irecv(Tensor& t, int src, int /*tag*/) {
  return pending(enqueue_recv(t, src), "irecv");
}

std::unique_ptr<Comm> NcclComm::split(int color, int key, const std::string& name) {
  ncclComm_t sub = nullptr;
  check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr),
        "ncclCommSplit");
  const int64_t seq = timeline_.count_split();
  if (!sub) return nullptr;
  // Members' world ranks: exchanged with an all-gather of (world rank) on the new comm.
  const int sub_size = comm_size(sub), sub_rank = user_rank(sub), mine = world_rank(rank_);
  std::vector<int> world(sub_size);
  int* device = nullptr;
  check(cudaMalloc(&device, sizeof(int) * sub_size), "cudaMalloc");
  check(cudaMemcpyAsync(device + sub_rank, &mine, sizeof(int), cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync");
  check(ncclAllGather(device + sub_rank, device, 1, ncclInt32, sub, stream_), "ncclAllGather");
  check(cudaMemcpyAsync(world.data(), device, sizeof(int) * sub_size, cudaMemcpyDeviceToHost,
                        stream_),
        "cudaMemcpyAsync");
  synchronize("split");
  cudaFree(device);
  return std::make_unique<NcclComm>(
      sub, ctx_, name.empty() ? fmt::format("{}.{}", name_, color) : name, std::move(world),
      timeout_, fmt::format("{}/{}:{}", key_, seq, color));
}

void NcclComm::blocking(TimedOp op, const std::string& what) {
  synchronize(what);
  ctx_->clock.wait_compute_until(timeline_.finish(op));
}
// The Work of an async operation: waiting synchronizes the stream, then records the event and
// makes the compute lane wait for its end.
Work NcclComm::pending(TimedOp op, std::string what) {
  struct Pending : Work::Impl {
    NcclComm* comm;
    TimedOp op;
    std::string what;
    void wait() override {
      comm->synchronize(what);
      comm->ctx_->clock.wait_compute_until(comm->timeline_.finish(op));
    }
  };
  auto p = std::make_unique<Pending>();
  p->comm = this;
  p->op = std::move(op);
  p->what = std::move(what);
  return Work(std::move(p));
}

void NcclComm::send_part(const Tensor& t, int peer, cudaStream_t stream) {
  check(ncclSend(t.raw(), t.numel(), nccl_type(t.dtype()), peer, comm_, stream), "ncclSend");
}
void NcclComm::recv_part(Tensor t, int peer, cudaStream_t stream) {
  check(ncclRecv(t.raw(), t.numel(), nccl_type(t.dtype()), peer, comm_, stream), "ncclRecv");
}
TimedOp NcclComm::enqueue_send(const Tensor& t, int dst) {
  cudaStream_t stream = ready();
  TimedOp op = timeline_.begin_send(timeline_.point_to_point("send", t.bytes(), t.bytes(), dst),
                                    dst, t.bytes());
  send_part(t, dst, stream);
  timeline_.enqueued(op);
  return op;
}
TimedOp NcclComm::enqueue_recv(Tensor& t, int src) {
  cudaStream_t stream = ready();
  TimedOp op =
      timeline_.begin_recv(timeline_.point_to_point("recv", t.bytes(), 0, src), src, t.bytes());
  recv_part(t, src, stream);
  timeline_.enqueued(op);
  return op;
}

// Polls the stream; past the timeout aborts the communicator with a message naming the rank.
void NcclComm::synchronize(const std::string& what) {
  auto start = std::chrono::steady_clock::now();
  while (true) {
    cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) check(status, "cudaStreamQuery");
    ncclResult_t async_error = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &async_error), "ncclCommGetAsyncError");
    check(async_error, "NCCL async error");
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_) {
      ncclCommAbort(comm_);
      throw CommError(fmt::format("timeout: rank {} waited more than {} s in {} of group {}",
                                  world_rank(rank_), timeout_, what, name_));
    }
    std::this_thread::yield();
  }
}

}  // namespace detail

using detail::NcclComm;

UniqueId make_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  UniqueId bytes(sizeof(id.internal));
  std::memcpy(bytes.data(), id.internal, sizeof(id.internal));
  return bytes;
}

std::unique_ptr<Comm> make_comm(RankContext& ctx, const UniqueId& id, int rank, int size,
                                double timeout_seconds) {
  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.data(), sizeof(nccl_id.internal));
  check(cudaSetDevice(ctx.device.index), "cudaSetDevice");
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, nccl_id, rank), "ncclCommInitRank");
  std::vector<int> world(size);
  for (int r = 0; r < size; ++r) world[r] = r;
  std::string key = "nccl:";
  for (char byte : id) key += fmt::format("{:02x}", static_cast<unsigned char>(byte));
  return std::make_unique<NcclComm>(comm, &ctx, "world", std::move(world), timeout_seconds,
                                    std::move(key));
}

}  // namespace mgpu::comm::nccl

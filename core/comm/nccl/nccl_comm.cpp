// NCCL backend: CUDA tensors, one GPU per rank, every operation enqueued on this rank's comm
// stream. Blocking calls synchronize that stream (polling, so a stuck collective becomes a
// timeout naming the rank instead of a hang); the async forms return a Work that does.
#include "core/comm/nccl/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/runtime/cuda/streams.h"

namespace mgpu::comm::nccl {

namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw CommError(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}
void check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw CommError(fmt::format("{}: {}", what, cudaGetErrorString(r)));
}

ncclDataType_t nccl_type(DType t) {
  return t == DType::f32 ? ncclFloat32 : t == DType::bf16 ? ncclBfloat16 : ncclFloat16;
}
ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclAvg;
}

class NcclComm final : public Comm {
 public:
  NcclComm(ncclComm_t comm, RankContext* ctx, std::string name, std::vector<int> world_ranks,
           double timeout)
      : comm_(comm),
        ctx_(ctx),
        name_(std::move(name)),
        world_ranks_(std::move(world_ranks)),
        timeout_(timeout) {
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
    check(cudaSetDevice(ctx_->device.index), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclComm() override {
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int group_rank) const override { return world_ranks_.at(group_rank); }
  std::string name() const override { return name_; }
  std::string backend() const override { return "nccl"; }

  void send(const Tensor& t, int dst, int tag) override {
    (void)tag;  // NCCL orders messages per pair by call order; tags are not needed
    check(ncclSend(t.raw(), t.numel(), nccl_type(t.dtype()), dst, comm_, ready()), "ncclSend");
    synchronize(fmt::format("send to rank {}", dst));
  }
  void recv(Tensor& t, int src, int tag) override {
    (void)tag;
    check(ncclRecv(t.raw(), t.numel(), nccl_type(t.dtype()), src, comm_, ready()), "ncclRecv");
    synchronize(fmt::format("recv from rank {}", src));
  }
  Work isend(const Tensor& t, int dst, int tag) override {
    (void)tag;
    check(ncclSend(t.raw(), t.numel(), nccl_type(t.dtype()), dst, comm_, ready()), "ncclSend");
    return pending("isend");
  }
  Work irecv(Tensor& t, int src, int tag) override {
    (void)tag;
    check(ncclRecv(t.raw(), t.numel(), nccl_type(t.dtype()), src, comm_, ready()), "ncclRecv");
    return pending("irecv");
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    enqueue_all_reduce(t, op);
    synchronize("all_reduce");
  }
  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    enqueue_all_reduce(t, op);
    return pending("all_reduce");
  }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    enqueue_reduce_scatter(in, out, op);
    synchronize("reduce_scatter");
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    enqueue_reduce_scatter(in, out, op);
    return pending("reduce_scatter");
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    enqueue_all_gather(in, out);
    synchronize("all_gather");
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    enqueue_all_gather(in, out);
    return pending("all_gather");
  }
  // NCCL has no all-to-all call: one grouped ncclSend/ncclRecv per peer, which NCCL schedules
  // together (the pattern NCCL's documentation gives for all-to-all).
  void all_to_all(const Tensor& in, Tensor& out) override {
    check_all_to_all_sizes(in, out, size_, rank_, name_);
    const int64_t block = in.numel() / size_;
    cudaStream_t stream = ready();
    check(ncclGroupStart(), "ncclGroupStart");
    for (int peer = 0; peer < size_; ++peer) {
      Tensor to_peer = in.flat_range(peer * block, (peer + 1) * block);
      Tensor from_peer = out.flat_range(peer * block, (peer + 1) * block);
      check(ncclSend(to_peer.raw(), block, nccl_type(in.dtype()), peer, comm_, stream), "ncclSend");
      check(ncclRecv(from_peer.raw(), block, nccl_type(out.dtype()), peer, comm_, stream),
            "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    synchronize("all_to_all");
  }
  // Grouped point-to-point, as all_to_all; a zero count posts nothing. The counts are trusted:
  // a send the partner does not expect makes the stream's synchronize time out naming this rank.
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) override {
    check_all_to_all_v_sizes(in, send_counts, out, recv_counts, size_, rank_, name_);
    cudaStream_t stream = ready();
    check(ncclGroupStart(), "ncclGroupStart");
    int64_t sent = 0, received = 0;
    for (int peer = 0; peer < size_; ++peer) {
      const int64_t to = send_counts[peer], from = recv_counts[peer];
      if (to > 0) {
        Tensor to_peer = in.flat_range(sent, sent + to);
        check(ncclSend(to_peer.raw(), to, nccl_type(in.dtype()), peer, comm_, stream), "ncclSend");
      }
      if (from > 0) {
        Tensor from_peer = out.flat_range(received, received + from);
        check(ncclRecv(from_peer.raw(), from, nccl_type(out.dtype()), peer, comm_, stream),
              "ncclRecv");
      }
      sent += to;
      received += from;
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    synchronize("all_to_all_v");
  }
  void broadcast(Tensor& t, int root) override {
    check(ncclBroadcast(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), root, comm_, ready()),
          "ncclBroadcast");
    synchronize("broadcast");
  }
  void barrier() override {
    // An all-reduce of one float is the cheapest way to make every rank meet.
    void* one = nullptr;
    check(cudaMallocAsync(&one, sizeof(float), stream_), "cudaMallocAsync");
    check(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, ready()), "ncclAllReduce");
    check(cudaFreeAsync(one, stream_), "cudaFreeAsync");
    synchronize("barrier");
  }
  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
    ncclComm_t sub = nullptr;
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr),
          "ncclCommSplit");
    if (!sub) return nullptr;
    // Members' world ranks: exchanged with an all-gather of (world rank) on the new comm.
    int sub_size = 0;
    check(ncclCommCount(sub, &sub_size), "ncclCommCount");
    std::vector<int> world(sub_size);
    int* device = nullptr;
    check(cudaMalloc(&device, sizeof(int) * sub_size), "cudaMalloc");
    int mine = world_rank(rank_), sub_rank = 0;
    check(ncclCommUserRank(sub, &sub_rank), "ncclCommUserRank");
    check(cudaMemcpyAsync(device + sub_rank, &mine, sizeof(int), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync");
    check(ncclAllGather(device + sub_rank, device, 1, ncclInt32, sub, stream_), "ncclAllGather");
    check(cudaMemcpyAsync(world.data(), device, sizeof(int) * sub_size, cudaMemcpyDeviceToHost,
                          stream_),
          "cudaMemcpyAsync");
    synchronize("split");
    cudaFree(device);
    return std::make_unique<NcclComm>(sub, ctx_,
                                      name.empty() ? fmt::format("{}.{}", name_, color) : name,
                                      std::move(world), timeout_);
  }

 private:
  // The comm stream, after making it wait (on the GPU) for the kernels this rank has queued on
  // its compute stream: a collective must read the finished gradients, not half-written ones.
  cudaStream_t ready() { return mgpu::cuda::comm_ready_stream(stream_); }

  void enqueue_all_reduce(Tensor& t, ReduceOp op) {
    check(ncclAllReduce(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), nccl_op(op), comm_,
                        ready()),
          "ncclAllReduce");
  }

  void enqueue_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
    // NCCL wants equal chunks; chunk_range lengths differ when n % N != 0, so require it here.
    if (in.numel() % size_ != 0)
      throw CommError(fmt::format("nccl reduce_scatter needs a length divisible by {} (got {})",
                                  size_, in.numel()));
    check(ncclReduceScatter(in.raw(), out.raw(), out.numel(), nccl_type(in.dtype()), nccl_op(op),
                            comm_, ready()),
          "ncclReduceScatter");
  }
  void enqueue_all_gather(const Tensor& in, Tensor& out) {
    if (out.numel() % size_ != 0)
      throw CommError(fmt::format("nccl all_gather needs a length divisible by {} (got {})", size_,
                                  out.numel()));
    check(ncclAllGather(in.raw(), out.raw(), in.numel(), nccl_type(in.dtype()), comm_, ready()),
          "ncclAllGather");
  }

  // Polls the stream; past the timeout aborts the communicator with a message naming the rank.
  void synchronize(const std::string& what) {
    auto start = std::chrono::steady_clock::now();
    while (true) {
      cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) check(status, "cudaStreamQuery");
      ncclResult_t async_error = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &async_error), "ncclCommGetAsyncError");
      check(async_error, "NCCL async error");
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_) {
        ncclCommAbort(comm_);
        throw CommError(fmt::format("timeout: rank {} waited more than {} s in {} of group {}",
                                    world_rank(rank_), timeout_, what, name_));
      }
      std::this_thread::yield();
    }
  }

  Work pending(std::string what) {
    struct Pending : Work::Impl {
      NcclComm* comm;
      std::string what;
      void wait() override { comm->synchronize(what); }
    };
    auto p = std::make_unique<Pending>();
    p->comm = this;
    p->what = std::move(what);
    return Work(std::move(p));
  }

  ncclComm_t comm_;
  RankContext* ctx_;
  std::string name_;
  std::vector<int> world_ranks_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

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
  return std::make_unique<NcclComm>(comm, &ctx, "world", std::move(world), timeout_seconds);
}

}  // namespace mgpu::comm::nccl

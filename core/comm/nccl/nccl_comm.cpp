// NCCL backend: CUDA tensors, one GPU per rank, every operation enqueued on this rank's comm
// stream. Blocking calls synchronize that stream (polling, so a stuck collective becomes a
// timeout naming the rank instead of a hang); the async forms return a Work that does.
// Traced like the other backends: each operation records one event (op, bytes, group, seq or
// peer) whose sent_bytes follow the shared algorithms' rule (algorithms/sent_bytes.h) and whose
// times come from the run's clock (nccl_timeline.h).
#include "core/comm/nccl/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/comm/algorithms/sent_bytes.h"
#include "core/comm/nccl/nccl_calls.h"
#include "core/comm/nccl/nccl_timeline.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::comm::nccl {

namespace {

class NcclComm final : public Comm {
 public:
  // `key`: the same on every member, unique to the group (its IssueBoard's key).
  NcclComm(ncclComm_t comm, RankContext* ctx, std::string name, std::vector<int> world_ranks,
           double timeout, std::string key)
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
  ~NcclComm() override {
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int group_rank) const override { return world_ranks_.at(group_rank); }
  std::string name() const override { return name_; }
  std::string backend() const override { return "nccl"; }

  // NCCL orders messages per pair by call order; tags are not needed.
  void send(const Tensor& t, int dst, int /*tag*/) override {
    blocking(enqueue_send(t, dst), fmt::format("send to rank {}", dst));
  }
  void recv(Tensor& t, int src, int /*tag*/) override {
    blocking(enqueue_recv(t, src), fmt::format("recv from rank {}", src));
  }
  Work isend(const Tensor& t, int dst, int /*tag*/) override {
    return pending(enqueue_send(t, dst), "isend");
  }
  Work irecv(Tensor& t, int src, int /*tag*/) override {
    return pending(enqueue_recv(t, src), "irecv");
  }

  void all_reduce(Tensor& t, ReduceOp op) override {
    blocking(enqueue_all_reduce(t, op), "all_reduce");
  }
  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    return pending(enqueue_all_reduce(t, op), "all_reduce");
  }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    blocking(enqueue_reduce_scatter(in, out, op), "reduce_scatter");
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return pending(enqueue_reduce_scatter(in, out, op), "reduce_scatter");
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    blocking(enqueue_all_gather(in, out), "all_gather");
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    return pending(enqueue_all_gather(in, out), "all_gather");
  }
  // NCCL has no all-to-all call: one grouped ncclSend/ncclRecv per peer, which NCCL schedules
  // together (the pattern NCCL's documentation gives for all-to-all).
  void all_to_all(const Tensor& in, Tensor& out) override {
    check_all_to_all_sizes(in, out, size_, rank_, name_);
    const int64_t n = in.numel(), block = n / size_;
    trace::Event e = timeline_.collective(
        "all_to_all", in.bytes(), algorithms::all_to_all_sent_bytes(n, elem_bytes(in), size_));
    auto exchange = [&](cudaStream_t stream) {
      grouped([&] {
        for (int peer = 0; peer < size_; ++peer) {
          send_part(in.flat_range(peer * block, (peer + 1) * block), peer, stream);
          recv_part(out.flat_range(peer * block, (peer + 1) * block), peer, stream);
        }
      });
    };
    blocking(timed(std::move(e), timeline_.modeled("all_to_all", n, elem_bytes(in)), exchange),
             "all_to_all");
  }
  // Grouped point-to-point, as all_to_all; a zero count posts nothing. The counts are trusted:
  // a send the partner does not expect makes the stream's synchronize time out naming this rank.
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) override {
    check_all_to_all_v_sizes(in, send_counts, out, recv_counts, size_, rank_, name_);
    const int bytes = elem_bytes(in);
    trace::Event e = timeline_.collective(
        "all_to_all_v", in.bytes(), algorithms::all_to_all_v_sent_bytes(send_counts, bytes, rank_));
    auto exchange = [&](cudaStream_t stream) {
      grouped([&] {
        int64_t sent = 0, received = 0;
        for (int peer = 0; peer < size_; ++peer) {
          const int64_t to = send_counts[peer], from = recv_counts[peer];
          if (to > 0) send_part(in.flat_range(sent, sent + to), peer, stream);
          if (from > 0) recv_part(out.flat_range(received, received + from), peer, stream);
          sent += to;
          received += from;
        }
      });
    };
    const double model = timeline_.modeled_all_to_all_v(send_counts, recv_counts, bytes);
    blocking(timed(std::move(e), model, exchange), "all_to_all_v");
  }
  void broadcast(Tensor& t, int root) override {
    const int64_t n = t.numel();
    trace::Event e = timeline_.collective(
        "broadcast", t.bytes(),
        algorithms::broadcast_sent_bytes(n, elem_bytes(t), size_, rank_, root));
    auto enqueue = [&](cudaStream_t stream) {
      check(ncclBroadcast(t.raw(), t.raw(), n, nccl_type(t.dtype()), root, comm_, stream),
            "ncclBroadcast");
    };
    blocking(timed(std::move(e), timeline_.modeled("broadcast", n, elem_bytes(t), root), enqueue),
             "broadcast");
  }
  void barrier() override {
    // An all-reduce of one float is the cheapest way to make every rank meet.
    trace::Event e = timeline_.collective("barrier", 0, algorithms::barrier_sent_bytes());
    auto enqueue = [&](cudaStream_t stream) {
      void* one = nullptr;
      check(cudaMallocAsync(&one, sizeof(float), stream), "cudaMallocAsync");
      check(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce");
      check(cudaFreeAsync(one, stream), "cudaFreeAsync");
    };
    blocking(timed(std::move(e), timeline_.modeled("barrier", 0, 4), enqueue), "barrier");
  }
  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
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
  void blocking(TimedOp op, const std::string& what) {
    synchronize(what);
    ctx_->clock.wait_compute_until(timeline_.finish(op));
  }
  // The Work of an async operation: waiting synchronizes the stream, then records the event and
  // makes the compute lane wait for its end.
  Work pending(TimedOp op, std::string what) {
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

  void send_part(const Tensor& t, int peer, cudaStream_t stream) {
    check(ncclSend(t.raw(), t.numel(), nccl_type(t.dtype()), peer, comm_, stream), "ncclSend");
  }
  void recv_part(Tensor t, int peer, cudaStream_t stream) {  // t: a view of the target
    check(ncclRecv(t.raw(), t.numel(), nccl_type(t.dtype()), peer, comm_, stream), "ncclRecv");
  }
  TimedOp enqueue_send(const Tensor& t, int dst) {
    cudaStream_t stream = ready();
    TimedOp op = timeline_.begin_send(timeline_.point_to_point("send", t.bytes(), t.bytes(), dst),
                                      dst, t.bytes());
    send_part(t, dst, stream);
    timeline_.enqueued(op);
    return op;
  }
  TimedOp enqueue_recv(Tensor& t, int src) {
    cudaStream_t stream = ready();
    TimedOp op =
        timeline_.begin_recv(timeline_.point_to_point("recv", t.bytes(), 0, src), src, t.bytes());
    recv_part(t, src, stream);
    timeline_.enqueued(op);
    return op;
  }
  TimedOp enqueue_all_reduce(Tensor& t, ReduceOp op) {
    const int64_t n = t.numel();
    trace::Event e = timeline_.collective(
        "all_reduce", t.bytes(), algorithms::all_reduce_sent_bytes(n, elem_bytes(t), size_, rank_));
    auto enqueue = [&](cudaStream_t stream) {
      check(ncclAllReduce(t.raw(), t.raw(), n, nccl_type(t.dtype()), nccl_op(op), comm_, stream),
            "ncclAllReduce");
    };
    return timed(std::move(e), timeline_.modeled("all_reduce", n, elem_bytes(t)), enqueue);
  }
  // NCCL wants equal chunks; chunk_range lengths differ when n % N != 0, so require it here.
  void check_divisible(const char* op, int64_t n) const {
    if (n % size_ != 0)
      throw CommError(fmt::format("nccl {} needs a length divisible by {} (got {})", op, size_, n));
  }
  TimedOp enqueue_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
    const int64_t n = in.numel();
    check_divisible("reduce_scatter", n);
    trace::Event e = timeline_.collective(
        "reduce_scatter", in.bytes(),
        algorithms::reduce_scatter_sent_bytes(n, elem_bytes(in), size_, rank_));
    auto enqueue = [&](cudaStream_t stream) {
      check(ncclReduceScatter(in.raw(), out.raw(), out.numel(), nccl_type(in.dtype()), nccl_op(op),
                              comm_, stream),
            "ncclReduceScatter");
    };
    return timed(std::move(e), timeline_.modeled("reduce_scatter", n, elem_bytes(in)), enqueue);
  }
  TimedOp enqueue_all_gather(const Tensor& in, Tensor& out) {
    const int64_t n = out.numel();
    check_divisible("all_gather", n);
    trace::Event e =
        timeline_.collective("all_gather", out.bytes(),
                             algorithms::all_gather_sent_bytes(n, elem_bytes(out), size_, rank_));
    auto enqueue = [&](cudaStream_t stream) {
      check(ncclAllGather(in.raw(), out.raw(), in.numel(), nccl_type(in.dtype()), comm_, stream),
            "ncclAllGather");
    };
    return timed(std::move(e), timeline_.modeled("all_gather", n, elem_bytes(out)), enqueue);
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
  std::string key = "nccl:";
  for (char byte : id) key += fmt::format("{:02x}", static_cast<unsigned char>(byte));
  return std::make_unique<NcclComm>(comm, &ctx, "world", std::move(world), timeout_seconds,
                                    std::move(key));
}

}  // namespace mgpu::comm::nccl

// The NCCL backend's collectives: each one traced as one event and enqueued on the comm stream
// between the timeline's marks; all-to-all as grouped point-to-point, which NCCL runs together.
#include <cstdint>
#include <span>

#include <fmt/format.h>

#include "core/comm/algorithms/sent_bytes.h"
#include "core/comm/nccl/nccl_calls.h"
#include "core/comm/nccl/nccl_comm_internal.h"

namespace mgpu::comm::nccl::detail {

void NcclComm::all_reduce(Tensor& t, ReduceOp op) {
  blocking(enqueue_all_reduce(t, op), "all_reduce");
}
Work NcclComm::all_reduce_async(Tensor& t, ReduceOp op) {
  return pending(enqueue_all_reduce(t, op), "all_reduce");
}
void NcclComm::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  blocking(enqueue_reduce_scatter(in, out, op), "reduce_scatter");
}
Work NcclComm::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  return pending(enqueue_reduce_scatter(in, out, op), "reduce_scatter");
}
void NcclComm::all_gather(const Tensor& in, Tensor& out) {
  blocking(enqueue_all_gather(in, out), "all_gather");
}
Work NcclComm::all_gather_async(const Tensor& in, Tensor& out) {
  return pending(enqueue_all_gather(in, out), "all_gather");
}
// NCCL has no all-to-all call: one grouped ncclSend/ncclRecv per peer, which NCCL schedules
// together (the pattern NCCL's documentation gives for all-to-all).
void NcclComm::all_to_all(const Tensor& in, Tensor& out) {
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
void NcclComm::all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                            std::span<const int64_t> recv_counts) {
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
void NcclComm::broadcast(Tensor& t, int root) {
  const int64_t n = t.numel();
  trace::Event e =
      timeline_.collective("broadcast", t.bytes(),
                           algorithms::broadcast_sent_bytes(n, elem_bytes(t), size_, rank_, root));
  auto enqueue = [&](cudaStream_t stream) {
    check(ncclBroadcast(t.raw(), t.raw(), n, nccl_type(t.dtype()), root, comm_, stream),
          "ncclBroadcast");
  };
  blocking(timed(std::move(e), timeline_.modeled("broadcast", n, elem_bytes(t), root), enqueue),
           "broadcast");
}
void NcclComm::barrier() {
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

TimedOp NcclComm::enqueue_all_reduce(Tensor& t, ReduceOp op) {
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
void NcclComm::check_divisible(const char* op, int64_t n) const {
  if (n % size_ != 0)
    throw CommError(fmt::format("nccl {} needs a length divisible by {} (got {})", op, size_, n));
}
TimedOp NcclComm::enqueue_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  const int64_t n = in.numel();
  check_divisible("reduce_scatter", n);
  trace::Event e =
      timeline_.collective("reduce_scatter", in.bytes(),
                           algorithms::reduce_scatter_sent_bytes(n, elem_bytes(in), size_, rank_));
  auto enqueue = [&](cudaStream_t stream) {
    check(ncclReduceScatter(in.raw(), out.raw(), out.numel(), nccl_type(in.dtype()), nccl_op(op),
                            comm_, stream),
          "ncclReduceScatter");
  };
  return timed(std::move(e), timeline_.modeled("reduce_scatter", n, elem_bytes(in)), enqueue);
}
TimedOp NcclComm::enqueue_all_gather(const Tensor& in, Tensor& out) {
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

}  // namespace mgpu::comm::nccl::detail

// The backend-independent parts of comm: chunking, Work, reduce-op names, the exercise seams and
// recv_reduce for backends without a fused one.
#include "core/comm/comm.h"

#include <iterator>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithms.h"
#include "core/runtime/context.h"

namespace mgpu::comm {

const char* reduce_op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : "avg";
}

std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int index) {
  if (parts <= 0 || index < 0 || index >= parts)
    throw std::out_of_range("chunk_range: index " + std::to_string(index) + " of " +
                            std::to_string(parts) + " parts");
  // The first n % parts chunks get one extra element, so chunks differ by at most one.
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = index * base + std::min<int64_t>(index, extra);
  int64_t size = base + (index < extra ? 1 : 0);
  return {begin, begin + size};
}

std::string describe_collective(const char* kind, const Tensor* t, const ReduceOp* op, int root,
                                bool with_count) {
  // Every collective call builds this, so it is written into one stack buffer and becomes one
  // string at the end (a string per piece cost a third of a microsecond per call).
  fmt::memory_buffer s;
  auto out = std::back_inserter(s);
  fmt::format_to(out, "{}(", kind);
  if (t && with_count) fmt::format_to(out, "count={}, ", t->numel());
  if (t) fmt::format_to(out, "{}", dtype_name(t->dtype()));
  if (op) fmt::format_to(out, ", {}", reduce_op_name(*op));
  if (root >= 0) fmt::format_to(out, ", root={}", root);
  s.push_back(')');
  return fmt::to_string(s);
}

void check_all_to_all_sizes(const Tensor& in, const Tensor& out, int group_size, int rank,
                            const std::string& group) {
  if (in.numel() % group_size != 0)
    throw CommError(fmt::format(
        "all_to_all on rank {} of group {}: in has {} elements, not divisible into {} equal "
        "blocks (one per rank); pad it to a multiple of {}",
        rank, group, in.numel(), group_size, group_size));
  if (out.numel() != in.numel() || out.dtype() != in.dtype())
    throw CommError(fmt::format(
        "all_to_all on rank {} of group {}: out has {} {} elements, in has {} {}; they must match",
        rank, group, out.numel(), dtype_name(out.dtype()), in.numel(), dtype_name(in.dtype())));
}

void check_all_to_all_v_sizes(const Tensor& in, std::span<const int64_t> send_counts,
                              const Tensor& out, std::span<const int64_t> recv_counts,
                              int group_size, int rank, const std::string& group) {
  auto where = [&] { return fmt::format("all_to_all_v on rank {} of group {}", rank, group); };
  for (auto [side, counts] :
       {std::pair{"send_counts", send_counts}, {"recv_counts", recv_counts}}) {
    if (static_cast<int>(counts.size()) != group_size)
      throw CommError(fmt::format("{}: {} has {} entries; it needs one per group rank ({})",
                                  where(), side, counts.size(), group_size));
    for (size_t j = 0; j < counts.size(); ++j)
      if (counts[j] < 0)
        throw CommError(fmt::format("{}: {}[{}] is {}; counts are elements, 0 or more", where(),
                                    side, j, counts[j]));
  }
  auto total = [](std::span<const int64_t> c) { return std::accumulate(c.begin(), c.end(), 0L); };
  if (in.numel() != total(send_counts) || out.numel() != total(recv_counts))
    throw CommError(fmt::format(
        "{}: in has {} elements and out {}, but send_counts sum to {} and recv_counts to {}; "
        "size each buffer to its counts' sum",
        where(), in.numel(), out.numel(), total(send_counts), total(recv_counts)));
  if (out.dtype() != in.dtype())
    throw CommError(fmt::format("{}: out is {}, in is {}; they must match", where(),
                                dtype_name(out.dtype()), dtype_name(in.dtype())));
}

void check_all_to_all_v_counts(std::span<const int64_t> send, std::span<const int64_t> recv, int n,
                               const std::vector<int>& world_rank, const std::string& group,
                               int64_t seq) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int64_t sent = send[static_cast<size_t>(i) * n + j];
      const int64_t expected = recv[static_cast<size_t>(j) * n + i];
      if (sent != expected)
        throw CommError(fmt::format(
            "all_to_all_v #{} in group {}: rank {} sends {} elements to rank {}, which expects {} "
            "from it (send_counts[{}] on rank {} must equal recv_counts[{}] on rank {})",
            seq, group, world_rank[i], sent, world_rank[j], expected, j, world_rank[i], i,
            world_rank[j]));
    }
}

Tensor ring_chunk(const Tensor& t, int parts, int index) {
  auto [begin, end] = chunk_range(t.numel(), parts, ((index % parts) + parts) % parts);
  return t.flat_range(begin, end);
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (...) {  // a move-assignment cannot throw; the error was reported on another path
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Work::~Work() {
  try {
    wait();
  } catch (...) {  // destructors must not throw; an unwaited failed op is reported elsewhere
  }
}

void Work::wait() {
  if (!impl_) return;
  // Release first so a throwing wait() is not retried by the destructor.
  std::unique_ptr<Impl> impl = std::move(impl_);
  impl->wait();
}

void Comm::recv_reduce(Tensor& accumulate, int src, int tag) {
  Tensor incoming =
      Tensor::empty({accumulate.numel()}, MemCategory::comm_buffers, accumulate.dtype());
  recv(incoming, src, tag);
  algorithms::add_into(accumulate, incoming);
}

namespace {
// Host messages packed into tensors live outside the rank's allocator: control data must not
// show in the lesson's memory figures. On CUDA devices they are device tensors (NCCL moves only
// device memory), from an allocator of the rank's GPU that no figure reads.
Allocator& message_memory() {
  static Allocator host(Device::cpu());
  return host;
}
Tensor packed_message(int64_t bytes) {
  const Device& device = current_rank().device;
  if (device.kind != DeviceKind::cuda)
    return Tensor::zeros({(bytes + 3) / 4}, MemCategory::comm_buffers, DType::f32,
                         &message_memory());
  Allocator uncounted(device);  // its books live as long as the tensor's storage
  return Tensor::zeros({(bytes + 3) / 4}, MemCategory::comm_buffers, DType::f32, &uncounted);
}
}  // namespace

void Comm::send_host(const HostMessage& message, int dst, int tag) {
  std::vector<float> words(static_cast<size_t>((message.bytes() + 3) / 4), 0.0f);
  if (message.bytes() > 0) std::memcpy(words.data(), message.data, message.bytes());
  Tensor packed = packed_message(message.bytes());
  packed.copy_from(
      Tensor::from(packed.shape(), words, MemCategory::comm_buffers, &message_memory()));
  send(packed, dst, tag);
}

void Comm::recv_host(const HostMessage& message, int src, int tag) {
  Tensor packed = packed_message(message.bytes());
  recv(packed, src, tag);
  const std::vector<float> words = packed.to_vector();
  if (message.bytes() > 0) std::memcpy(message.data, words.data(), message.bytes());
}

}  // namespace mgpu::comm

// Comm: one rank's view of a group of ranks. Point-to-point (send/recv, blocking and async) and
// the collectives training needs (all-reduce, reduce-scatter, all-gather, all-to-all and its
// variable-size form, broadcast, barrier), plus split() to carve the world into process groups
// (DP/TP/PP/CP groups of a mesh). Backends: local (ranks are threads), mpi (processes), nccl (one
// GPU per rank).
//
// Lengths need not divide by the group size: chunk r of n elements over N ranks is
// chunk_range(n, N, r) (the first n % N ranks get one extra element).
#pragma once
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace mgpu::comm {

enum class ReduceOp : uint8_t { sum, avg };
const char* reduce_op_name(ReduceOp op);

// [begin, end) of chunk `index` when n elements are split over `parts` ranks.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int index);
// Chunk `index` of `t` as a view, with the index taken modulo `parts` (ring algorithms count
// chunks as r - step, which goes negative).
Tensor ring_chunk(const Tensor& t, int parts, int index);
// t[i] /= divisor on any device (avg's last step): a division, not a product with 1/divisor, so
// the mean has the same bits everywhere. A cuda tensor (ranks sharing a GPU on the local
// backend) makes a round trip through host memory; phantom tensors are left alone.
void divide(Tensor& t, float divisor);

// One member's collective call as members compare it and mismatch tables print it:
// "all_reduce(count=4, f32, sum)", "broadcast(count=8, f32, root=0)", "barrier()"; without the
// count where members' sizes may differ: "all_to_all_v(f32)".
std::string describe_collective(const char* kind, const Tensor* t, const ReduceOp* op,
                                int root = -1, bool with_count = true);

// all_to_all's argument check, shared by the backends: `in` and `out` the same length, divisible
// by the group size; otherwise a CommError naming the sizes.
void check_all_to_all_sizes(const Tensor& in, const Tensor& out, int group_size, int rank,
                            const std::string& group);

// all_to_all_v's argument check, shared by the backends: one count per group rank on each side,
// none negative, `in` holding the sum of send_counts and `out` the sum of recv_counts, one dtype;
// otherwise a CommError naming what is wrong.
void check_all_to_all_v_sizes(const Tensor& in, std::span<const int64_t> send_counts,
                              const Tensor& out, std::span<const int64_t> recv_counts,
                              int group_size, int rank, const std::string& group);
// all_to_all_v's agreement, given every member's counts (send[i * n + j]: what group rank i sends
// to j; recv[j * n + i]: what j expects from i): the first pair (i, j) whose counts differ is a
// CommError naming both ranks (world ranks from `world_rank`) and both counts; the same message on
// every member that checks the same matrices.
void check_all_to_all_v_counts(std::span<const int64_t> send, std::span<const int64_t> recv, int n,
                               const std::vector<int>& world_rank, const std::string& group,
                               int64_t seq);

// Element types of host messages: the control data a program sends besides tensors (token ids,
// lengths, counters, text), each with its own type instead of smuggled through floats.
enum class HostType : uint8_t { u8, i32, i64, f32 };
constexpr int64_t host_type_size(HostType t) {
  return t == HostType::u8 ? 1 : t == HostType::i64 ? 8 : 4;
}
template <class T>
constexpr HostType host_type_of() {
  if constexpr (std::is_same_v<T, int32_t>)
    return HostType::i32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return HostType::i64;
  else if constexpr (std::is_same_v<T, float>)
    return HostType::f32;
  else {
    static_assert(sizeof(T) == 1, "host messages carry u8, i32, i64 or f32 values");
    return HostType::u8;
  }
}

// `count` values of `type` in host memory: what send_host / recv_host move, byte for byte.
struct HostMessage {
  void* data = nullptr;
  int64_t count = 0;
  HostType type = HostType::u8;
  int64_t bytes() const { return count * host_type_size(type); }
};

// A pending async operation. wait() blocks until it completes (and, on the modeled clock, makes
// the compute lane wait for it too). Waiting twice is harmless; destroying an unwaited Work waits.
class Work {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void wait() = 0;
  };
  Work() = default;
  explicit Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept;
  ~Work();
  void wait();
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Raised on every rank of a world when a student's communication cannot work: mismatched
// collectives, or waits that can never complete (deadlock) / exceed the timeout. what() holds a
// per-rank "who waits for whom" table.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised in a rank's pending communication when another rank of the world has already failed;
// World::run reports that other rank's error, not this one.
class Aborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;                      // my rank within this group
  virtual int size() const = 0;                      // ranks in this group
  virtual int world_rank(int group_rank) const = 0;  // a member's rank in the world
  virtual std::string name() const = 0;              // "world", or the name given to split()
  virtual std::string backend() const = 0;           // "local", "mpi", "nccl"

  // Point-to-point. Messages between a pair with the same tag arrive in order.
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  virtual Work isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual Work irecv(Tensor& t, int src, int tag = 0) = 0;
  // Receives a message of accumulate.numel() f32 values from src and adds it in:
  // accumulate[i] += message[i], bit for bit what recv into a temporary + add would give, and the
  // same on the modeled clock and in the trace (a "recv"). The default does exactly that; the
  // local and MPI backends add straight from the sender's (or the wire's) buffer: one memory pass,
  // no temporary. The ring reduce-scatter's step.
  virtual void recv_reduce(Tensor& accumulate, int src, int tag = 0);
  // Point-to-point of host values with their type (control messages: they carry values even when
  // the rank's device is phantom). Timed and traced like send/recv, with the message's real byte
  // count; the receiver's message must have the same type and count. The default packs the bytes
  // into an f32 tensor on the rank's device (NCCL moves only device memory); the local and MPI
  // backends move the bytes as they are.
  virtual void send_host(const HostMessage& message, int dst, int tag = 0);
  virtual void recv_host(const HostMessage& message, int src, int tag = 0);

  // Collectives; every member must call them in the same order with matching arguments.
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // Issues the all-reduce on the comm lane and returns at once (DDP overlap); wait() before use.
  virtual Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // in: the full tensor (n elements) on every rank; out: my chunk_range(n, size, rank) of the
  // reduction.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) = 0;
  // in: my chunk (chunk_range(n, size, rank) elements); out: all n elements on every rank.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in: size() equal blocks ordered by destination (block j goes to group rank j); out: the same
  // size, blocks ordered by source (block j came from group rank j). in.numel() % size() != 0 ->
  // CommError naming the sizes. (DeepSpeed-Ulysses' sequence <-> head re-sharding.)
  virtual void all_to_all(const Tensor& in, Tensor& out) = 0;
  // Variable-size all-to-all (mixture-of-experts token dispatch and combine): this rank sends
  // send_counts[j] elements to group rank j and receives recv_counts[j] from it (one count per
  // group rank, in elements); `in` holds sum(send_counts) elements packed in group-rank order,
  // `out` sum(recv_counts) in group-rank order of the sources. A zero count moves no message. A
  // send count that differs from its partner's recv count is a CommError on every member naming
  // both ranks and both counts (the backends that run their own algorithms; NCCL checks only
  // this rank's arguments).
  virtual void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                            std::span<const int64_t> recv_counts) = 0;
  // Like reduce_scatter / all_gather, but issued on the comm lane and returning at once (ZeRO-2's
  // per-bucket reduce-scatter during backward, FSDP's prefetched all-gather); wait() before use.
  virtual Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) = 0;
  virtual Work all_gather_async(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // Ranks with the same color form a group, ordered by (key, world rank). Collective over this
  // comm. `name` labels the group in traces and errors (e.g. "dp0", "pp1").
  virtual std::unique_ptr<Comm> split(int color, int key, const std::string& name = "") = 0;
};

// A vector of host values: its length (i64), then the values (absent when empty).
template <class T>
void send_values(Comm& comm, const std::vector<T>& values, int dst, int tag) {
  int64_t count = static_cast<int64_t>(values.size());
  comm.send_host({&count, 1, HostType::i64}, dst, tag);
  if (count > 0)
    comm.send_host({const_cast<T*>(values.data()), count, host_type_of<T>()}, dst, tag);
}
template <class T>
std::vector<T> recv_values(Comm& comm, int src, int tag) {
  int64_t count = 0;
  comm.recv_host({&count, 1, HostType::i64}, src, tag);
  std::vector<T> values(static_cast<size_t>(count));
  if (count > 0) comm.recv_host({values.data(), count, host_type_of<T>()}, src, tag);
  return values;
}

}  // namespace mgpu::comm

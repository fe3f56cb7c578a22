// A test-only comm::Comm decorator for exercise 01 ("ring watch"): it forwards every call to the
// rank's real communicator and records each point-to-point message as the elements of the tensor
// being all-reduced that it covers (or a temporary of E elements), so that a wrong ring can be
// told apart from the page's ring (ring_diagnosis.h) by phase, step and chunk. When a receive
// fails (the comm layer's error on a size mismatch), it rethrows with the step and the chunk.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/comm/comm.h"
#include "core/tensor/tensor.h"

namespace mgpu::grade {

// One message a rank sent or received.
struct RingMessage {
  std::string call;     // send, isend, recv, irecv, recv_reduce
  int peer = -1;        // the rank it went to or came from
  bool inside = false;  // elements of the tensor being all-reduced (else a temporary)
  int64_t begin = 0;    // where they start in that tensor (when inside)
  int64_t length = 0;   // elements
};

// One rank's messages, sends and receives apart (their order within a step does not matter).
struct RingLog {
  std::vector<RingMessage> sends, recvs;
};

// Where the k-th send (or receive) of rank r falls on the page's ring of `ranks` ranks: step s of
// the reduce-scatter sends chunk r-s-1 and adds into chunk r-s-2; step s of the all-gather sends
// chunk r-s and receives chunk r-s-1.
struct RingStep {
  bool reduce_scatter = true;
  int step = 0;
  int behind = 0;  // the chunk is r-s-behind
  int chunk = 0;   // (r - s - behind) mod N
  std::string where() const {
    return fmt::format("{} step {}", reduce_scatter ? "reduce-scatter" : "all-gather", step);
  }
  std::string rule() const { return behind == 0 ? "r-s" : fmt::format("r-s-{}", behind); }
};

inline RingStep ring_step(bool send, int k, int rank, int ranks) {
  RingStep s;
  s.reduce_scatter = k < ranks - 1;
  s.step = s.reduce_scatter ? k : k - (ranks - 1);
  s.behind = send ? (s.reduce_scatter ? 1 : 0) : (s.reduce_scatter ? 2 : 1);
  s.chunk = ((rank - s.step - s.behind) % ranks + ranks) % ranks;
  return s;
}

// "elements 0..250 (chunk 0)", "elements 3..253 (not one of the 4 chunks)", "a temporary of 250
// elements": what a message covers, for a tensor of n elements cut into `ranks` chunks.
inline std::string describe_elements(const RingMessage& m, int64_t n, int ranks) {
  if (!m.inside) return fmt::format("a temporary of {} elements", m.length);
  const int64_t end = m.begin + m.length;
  std::string range = fmt::format("elements {}..{}", m.begin, end);
  if (m.begin < 0 || end > n) return fmt::format("{} (outside the tensor of {})", range, n);
  for (int c = 0; c < ranks; ++c)
    if (comm::chunk_range(n, ranks, c) == std::pair{m.begin, end})
      return fmt::format("{} (chunk {})", range, c);
  return fmt::format("{} (not one of the {} chunks)", range, ranks);
}

// Which messages of the all-reduce of `base` went where.
class RingWatch final : public comm::Comm {
 public:
  RingWatch(comm::Comm& inner, const Tensor& base, RingLog& log)
      : inner_(inner), base_(base), log_(log) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int world_rank(int group_rank) const override { return inner_.world_rank(group_rank); }
  std::string name() const override { return inner_.name(); }
  std::string backend() const override { return inner_.backend(); }

  void send(const Tensor& t, int dst, int tag = 0) override {
    note(log_.sends, "send", t, dst);
    inner_.send(t, dst, tag);
  }
  comm::Work isend(const Tensor& t, int dst, int tag = 0) override {
    note(log_.sends, "isend", t, dst);
    return inner_.isend(t, dst, tag);
  }
  void recv(Tensor& t, int src, int tag = 0) override {
    const std::string context = note(log_.recvs, "recv", t, src);
    guarded(context, [&] { inner_.recv(t, src, tag); });
  }
  void recv_reduce(Tensor& accumulate, int src, int tag = 0) override {
    const std::string context = note(log_.recvs, "recv_reduce", accumulate, src);
    guarded(context, [&] { inner_.recv_reduce(accumulate, src, tag); });
  }
  comm::Work irecv(Tensor& t, int src, int tag = 0) override {
    const std::string context = note(log_.recvs, "irecv", t, src);
    comm::Work work;
    guarded(context, [&] { work = inner_.irecv(t, src, tag); });
    return comm::Work(std::make_unique<GuardedWait>(std::move(work), context));
  }
  void send_host(const comm::HostMessage& m, int dst, int tag = 0) override {
    inner_.send_host(m, dst, tag);
  }
  void recv_host(const comm::HostMessage& m, int src, int tag = 0) override {
    inner_.recv_host(m, src, tag);
  }

  void all_reduce(Tensor& t, comm::ReduceOp op) override { inner_.all_reduce(t, op); }
  comm::Work all_reduce_async(Tensor& t, comm::ReduceOp op) override {
    return inner_.all_reduce_async(t, op);
  }
  void reduce_scatter(const Tensor& in, Tensor& out, comm::ReduceOp op) override {
    inner_.reduce_scatter(in, out, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override { inner_.all_gather(in, out); }
  void all_to_all(const Tensor& in, Tensor& out) override { inner_.all_to_all(in, out); }
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) override {
    inner_.all_to_all_v(in, send_counts, out, recv_counts);
  }
  comm::Work reduce_scatter_async(const Tensor& in, Tensor& out, comm::ReduceOp op) override {
    return inner_.reduce_scatter_async(in, out, op);
  }
  comm::Work all_gather_async(const Tensor& in, Tensor& out) override {
    return inner_.all_gather_async(in, out);
  }
  void broadcast(Tensor& t, int root) override { inner_.broadcast(t, root); }
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<Comm> split(int color, int key, const std::string& name = "") override {
    return inner_.split(color, key, name);
  }

 private:
  // A failed asynchronous receive, rethrown with its step and chunk when it is waited for.
  struct GuardedWait : comm::Work::Impl {
    GuardedWait(comm::Work w, std::string c) : work(std::move(w)), context(std::move(c)) {}
    void wait() override {
      try {
        work.wait();
      } catch (const comm::CommError& e) {
        throw comm::CommError(e.what() + context);
      }
    }
    comm::Work work;
    std::string context;
  };

  template <class F>
  static void guarded(const std::string& context, F&& call) {
    try {
      call();
    } catch (const comm::CommError& e) {
      throw comm::CommError(e.what() + context);
    }
  }

  // Records the message; returns the line a failed receive adds to the comm layer's error.
  std::string note(std::vector<RingMessage>& list, const char* call, const Tensor& t, int peer) {
    RingMessage m{call, peer, false, 0, t.numel()};
    if (base_.defined() && t.defined() && t.shares_storage(base_) && base_.has_data()) {
      m.inside = true;
      const auto at = [](const Tensor& x) { return reinterpret_cast<intptr_t>(x.raw()); };
      m.begin = (at(t) - at(base_)) / static_cast<int64_t>(dtype_size(base_.dtype()));
    }
    list.push_back(m);
    const int k = static_cast<int>(list.size()) - 1;
    const std::string where = k < 2 * (size() - 1)
                                  ? "at " + ring_step(false, k, rank(), size()).where()
                                  : "after the ring's last step";
    return fmt::format(
        "\n  (rank {}'s receive #{}, {} of the page's ring: {} into {} from rank {})", rank(),
        k + 1, where, call, describe_elements(m, base_.numel(), size()), peer);
  }

  comm::Comm& inner_;
  Tensor base_;
  RingLog& log_;
};

}  // namespace mgpu::grade

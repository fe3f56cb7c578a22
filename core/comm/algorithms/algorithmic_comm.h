// AlgorithmicComm: the collectives of every backend that runs its own algorithms (local threads,
// mpi processes, the planner's symmetric groups), written once. A backend provides only the
// point-to-point layer (send/recv/isend/irecv, recv_reduce) with its clock and wait bookkeeping,
// plus split(); this class turns each collective call into: argument checks -> the members'
// agreement on the call (a backend hook) -> the shared algorithm (algorithms.h) on the backend's
// send/recv, on the comm lane -> one trace event. So a collective sends the same messages, sums
// in the same order and draws the same timeline on every backend.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/all_reduce_fn.h"
#include "core/runtime/context.h"

namespace mgpu::comm {

// One collective call: what the members compare, what a replay recognises, what the trace shows.
struct CollectiveCall {
  const char* kind = "";
  const Tensor* shown = nullptr;  // the tensor its description shows (none for barrier)
  std::optional<ReduceOp> op;
  int root = -1;
  int64_t in_elements = 0, out_elements = 0;
  int64_t bytes = 0;  // the trace event's bytes
  // all_to_all_v: this rank's counts. Members' counts differ, so they are not part of what
  // members compare (describe() then omits the count); a replay must tell them apart.
  std::span<const int64_t> send_counts, recv_counts;
  // "all_reduce(count=4, f32, sum)": describe_collective's words.
  std::string describe() const;
};

// A non-owning reference to a callable `void()`: the collective's body, called once, without
// the allocation a std::function of a capturing lambda may need.
class StepsRef {
 public:
  template <class Fn>
  StepsRef(Fn& fn) : object_(&fn), call_([](void* f) { (*static_cast<Fn*>(f))(); }) {}
  void operator()() const { call_(object_); }

 private:
  void* object_;
  void (*call_)(void*);
};

class AlgorithmicComm : public Comm {
 public:
  int rank() const final { return rank_; }
  int size() const final { return static_cast<int>(members_.size()); }
  int world_rank(int group_rank) const final { return members_.at(group_rank); }
  std::string name() const final { return name_; }

  void all_reduce(Tensor& t, ReduceOp op) final;
  // Runs now, in this thread, but on the modeled clock only the comm lane is busy until the
  // caller waits: that is what lets DDP overlap gradient buckets with backward compute.
  Work all_reduce_async(Tensor& t, ReduceOp op) final;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) final;
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) final;
  void all_gather(const Tensor& in, Tensor& out) final;
  Work all_gather_async(const Tensor& in, Tensor& out) final;
  void all_to_all(const Tensor& in, Tensor& out) final;
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts, Tensor& out,
                    std::span<const int64_t> recv_counts) final;
  void broadcast(Tensor& t, int root) final;
  void barrier() final;

 protected:
  // `members`: the group's world ranks in group-rank order; this rank is members[rank].
  AlgorithmicComm(RankContext& ctx, std::string name, std::vector<int> members, int rank,
                  AllReduceFn all_reduce);

  // ---- hooks a backend may fill ----
  // Before a collective's steps: the members check they make the same call (local: the world's
  // registry; mpi: a hash all-reduce). Symmetric groups have no other members to ask.
  virtual void agree_on_call(int64_t /*seq*/, const CollectiveCall& /*call*/) {}
  // all_to_all_v, once the call agrees: the members check that every send count equals its
  // partner's recv count (check_all_to_all_v_counts), outside the modeled clock like the call's
  // agreement (a real all-to-all-v trusts counts its caller exchanged).
  virtual void agree_on_counts(int64_t /*seq*/, std::span<const int64_t> /*send_counts*/,
                               std::span<const int64_t> /*recv_counts*/) {}
  // Runs the collective's steps (symmetric groups replay a recorded run instead). `start`: the
  // collective's start on the comm lane.
  virtual void run_steps(const CollectiveCall& /*call*/, double /*start*/, StepsRef steps) {
    steps();
  }
  // A tensor the collective reads or writes (symmetric groups refuse tensors with values).
  virtual void check_payload(const Tensor& /*t*/, const char* /*op*/) const {}
  // The broadcast's steps: the binomial tree (symmetric groups price the tree instead).
  virtual void broadcast_steps(Tensor& t, int root);

  // ---- for the backend's point-to-point layer ----
  RankContext& ctx() const { return ctx_; }
  const AllReduceFn& all_reduce_algorithm() const { return all_reduce_; }
  bool in_collective() const { return depth_ > 0; }
  const char* collective_kind() const { return collective_kind_; }  // while in_collective()
  int64_t collective_seq() const { return collective_seq_; }
  int my_world_rank() const { return members_[rank_]; }
  const std::vector<int>& members() const { return members_; }
  // The next number of this group's collective sequence (split() is one of its calls).
  int64_t next_seq() { return seq_++; }
  // "rank 2 of group tp (4 ranks): send to rank 7 is out of range" as a CommError.
  void check_peer(int peer, const char* what) const;
  // A blocking p2p makes the compute lane wait for it, except inside a collective: there only
  // the comm lane moves, and the collective decides (blocking now, async at Work::wait()).
  void compute_waits_for(double end);
  // Bytes leaving this rank (trace sent_bytes: a collective's event sums its steps' sends).
  void count_sent(int64_t bytes) { sent_bytes_ += bytes; }
  int64_t sent_bytes() const { return sent_bytes_; }
  // A point-to-point event, unless inside a collective (which records one event for all of it).
  // `wait`: the part of [start, end] spent waiting for the partner (trace::Event::wait).
  void record_p2p(const char* op, int group_peer, int64_t bytes, int64_t sent_bytes, double start,
                  double end, double wait = 0);
  // A receive from group rank `src` posted at `posted` whose message left its sender at `sent`
  // and takes `transfer` on the link: on the modeled clock it ends at max(posted, sent +
  // transfer), and the time before `sent` is waiting for the partner. On the wall clock it ends
  // now; `sent_on_my_clock`: the sender's stamp is on this rank's clock (threads of one world
  // share its epoch; processes do not), so the time before it is measured as waiting too.
  // Moves the comm lane, records the recv (or adds its wait to the enclosing collective's) and
  // returns its end.
  double receive_ends(int src, int64_t bytes, double posted, double sent, double transfer,
                      bool sent_on_my_clock);
  // Waiting inside the collective being run (a backend that replays a collective adds it here).
  void count_wait(double seconds) { collective_wait_ += seconds; }
  double collective_wait() const { return collective_wait_; }
  // A Work whose wait() makes the compute lane wait for `end`.
  Work wait_until(double end);
  // A Work whose wait() runs `fn`.
  template <class Fn>
  static Work on_wait(Fn fn) {
    struct Pending : Work::Impl {
      Fn fn;
      explicit Pending(Fn f) : fn(std::move(f)) {}
      void wait() override { fn(); }
    };
    return Work(std::make_unique<Pending>(std::move(fn)));
  }

 private:
  // Checks the call against the other members, runs the steps (sends/recvs on the comm lane),
  // records one trace event, and returns the collective's end time on this rank.
  double collective(const CollectiveCall& call, StepsRef steps);
  double all_reduce_on_comm_lane(Tensor& t, ReduceOp op);
  double reduce_scatter_on_comm_lane(const Tensor& in, Tensor& out, ReduceOp op);
  double all_gather_on_comm_lane(const Tensor& in, Tensor& out);

  RankContext& ctx_;
  std::string name_;          // for people: "world", "dp0"
  std::vector<int> members_;  // world ranks, in group-rank order
  int rank_;
  AllReduceFn all_reduce_;
  int64_t seq_ = 0;                   // this group's collective counter (same on every member)
  int depth_ = 0;                     // > 0 while inside a collective
  int64_t sent_bytes_ = 0;            // bytes this rank has sent in this group, ever
  const char* collective_kind_ = "";  // the collective this rank is in, while depth_ > 0
  int64_t collective_seq_ = 0;
  double collective_wait_ = 0;  // waiting inside the collective this rank is in
};

}  // namespace mgpu::comm

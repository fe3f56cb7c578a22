// The collectives of AlgorithmicComm (algorithmic_comm.h): each one is a CollectiveCall, checked,
// agreed on by the members, run as the shared algorithm on the backend's point-to-point layer.
//
// Modeled clock: the steps move only the comm lane (a step's send occupies it for the transfer, a
// receive ends at max(posted, sent + transfer)); the collective ends when its last step does.
// Blocking collectives then make the compute lane wait; async ones do so in Work::wait(). The
// event's `wait` sums its receives' waiting for a partner that had not sent yet.
#include "core/comm/algorithms/algorithmic_comm.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm {

std::string CollectiveCall::describe() const {
  return describe_collective(kind, shown, op ? &*op : nullptr, root, send_counts.empty());
}

AlgorithmicComm::AlgorithmicComm(RankContext& ctx, std::string name, std::vector<int> members,
                                 int rank, AllReduceFn all_reduce)
    : ctx_(ctx),
      name_(std::move(name)),
      members_(std::move(members)),
      rank_(rank),
      all_reduce_(std::move(all_reduce)) {}

void AlgorithmicComm::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size())
    throw CommError(fmt::format("rank {} of group {} ({} ranks): {} rank {} is out of range", rank_,
                                name_, size(), what, peer));
}

void AlgorithmicComm::compute_waits_for(double end) {
  if (depth_ == 0) ctx_.clock.wait_compute_until(end);
}

void AlgorithmicComm::record_p2p(const char* op, int group_peer, int64_t bytes, int64_t sent_bytes,
                                 double start, double end, double wait) {
  if (depth_ > 0 || !ctx_.tracer.enabled) return;
  trace::Event e = trace::comm_event(op, start, end, bytes, sent_bytes, name_, wait);
  e.peer = world_rank(group_peer);
  ctx_.tracer.record(std::move(e));
}

double AlgorithmicComm::receive_ends(int src, int64_t bytes, double posted, double sent,
                                     double transfer, bool sent_on_my_clock) {
  RankClock& clock = ctx_.clock;
  const double end = clock.modeled() ? std::max(posted, sent + transfer) : clock.wall_now();
  const double wait =
      clock.modeled() || sent_on_my_clock ? std::clamp(sent - posted, 0.0, end - posted) : 0.0;
  clock.wait_comm_until(end);
  if (depth_ > 0) count_wait(wait);
  record_p2p("recv", src, bytes, 0, posted, end, wait);
  return end;
}

Work AlgorithmicComm::wait_until(double end) {
  return on_wait([clock = &ctx_.clock, end] { clock->wait_compute_until(end); });
}

double AlgorithmicComm::collective(const CollectiveCall& call, StepsRef steps) {
  RankClock& clock = ctx_.clock;
  if (depth_ > 0) {  // a collective used inside another one is part of it
    steps();
    return clock.comm_now();
  }
  const int64_t seq = seq_++;
  collective_kind_ = call.kind;  // for the deadlock table, which formats them only when shown
  collective_seq_ = seq;
  agree_on_call(seq, call);
  const double start = clock.comm_issue_time();
  const int64_t sent_before = sent_bytes_;
  collective_wait_ = 0;
  ++depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{depth_};
  run_steps(call, start, steps);
  const double end = clock.modeled() ? std::max(start, clock.comm_now()) : clock.wall_now();
  clock.wait_comm_until(end);
  if (ctx_.tracer.enabled) {  // sent_bytes: what this rank's sends inside it carried
    trace::Event e = trace::comm_event(call.kind, start, end, call.bytes, sent_bytes_ - sent_before,
                                       name_, collective_wait_);
    e.seq = seq;
    ctx_.tracer.record(std::move(e));
  }
  return end;
}

// ---- the collectives ----

double AlgorithmicComm::all_reduce_on_comm_lane(Tensor& t, ReduceOp op) {
  check_payload(t, "all_reduce");
  const CollectiveCall call{"all_reduce", &t, op, -1, t.numel(), t.numel(), t.bytes()};
  auto steps = [&] {
    if (!all_reduce_)
      throw std::logic_error(fmt::format(
          "group {}: this communicator was made without an all-reduce algorithm (a World gives "
          "its ranks one; a RankContext made by hand needs its all_reduce set)",
          name_));
    all_reduce_(*this, t, op);
  };
  return collective(call, steps);
}

double AlgorithmicComm::reduce_scatter_on_comm_lane(const Tensor& in, Tensor& out, ReduceOp op) {
  algorithms::check_my_chunk(*this, "reduce_scatter", "out", out.numel(), in.numel());
  check_payload(in, "reduce_scatter");
  const CollectiveCall call{"reduce_scatter", &in, op, -1, in.numel(), out.numel(), in.bytes()};
  auto steps = [&] { algorithms::ring_reduce_scatter_into(*this, in, out, op, &ctx_.allocator); };
  return collective(call, steps);
}

double AlgorithmicComm::all_gather_on_comm_lane(const Tensor& in, Tensor& out) {
  algorithms::check_my_chunk(*this, "all_gather", "in", in.numel(), out.numel());
  check_payload(out, "all_gather");
  const CollectiveCall call{"all_gather", &out, {}, -1, in.numel(), out.numel(), out.bytes()};
  auto steps = [&] { algorithms::ring_all_gather_from(*this, in, out); };
  return collective(call, steps);
}

void AlgorithmicComm::all_reduce(Tensor& t, ReduceOp op) {
  ctx_.clock.wait_compute_until(all_reduce_on_comm_lane(t, op));
}

Work AlgorithmicComm::all_reduce_async(Tensor& t, ReduceOp op) {
  return wait_until(all_reduce_on_comm_lane(t, op));
}

void AlgorithmicComm::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  ctx_.clock.wait_compute_until(reduce_scatter_on_comm_lane(in, out, op));
}

Work AlgorithmicComm::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  return wait_until(reduce_scatter_on_comm_lane(in, out, op));  // runs now, like all_reduce_async
}

void AlgorithmicComm::all_gather(const Tensor& in, Tensor& out) {
  ctx_.clock.wait_compute_until(all_gather_on_comm_lane(in, out));
}

Work AlgorithmicComm::all_gather_async(const Tensor& in, Tensor& out) {
  return wait_until(all_gather_on_comm_lane(in, out));
}

void AlgorithmicComm::all_to_all(const Tensor& in, Tensor& out) {
  check_all_to_all_sizes(in, out, size(), rank_, name_);
  check_payload(out, "all_to_all");
  const CollectiveCall call{"all_to_all", &in, {}, -1, in.numel(), out.numel(), in.bytes()};
  auto steps = [&] { algorithms::pairwise_all_to_all(*this, in, out); };
  ctx_.clock.wait_compute_until(collective(call, steps));
}

void AlgorithmicComm::all_to_all_v(const Tensor& in, std::span<const int64_t> send_counts,
                                   Tensor& out, std::span<const int64_t> recv_counts) {
  check_all_to_all_v_sizes(in, send_counts, out, recv_counts, size(), rank_, name_);
  check_payload(out, "all_to_all_v");
  // The event's bytes: what this rank sends (its own block included, as all_to_all's in.bytes()).
  CollectiveCall call{"all_to_all_v", &in, {}, -1, in.numel(), out.numel(), in.bytes()};
  call.send_counts = send_counts;
  call.recv_counts = recv_counts;
  auto steps = [&] {
    agree_on_counts(collective_seq_, send_counts, recv_counts);
    algorithms::pairwise_all_to_all_v(*this, in, send_counts, out, recv_counts);
  };
  ctx_.clock.wait_compute_until(collective(call, steps));
}

void AlgorithmicComm::broadcast_steps(Tensor& t, int root) {
  algorithms::tree_broadcast(*this, t, root);
}

void AlgorithmicComm::broadcast(Tensor& t, int root) {
  check_payload(t, "broadcast");
  check_peer(root, "broadcast from root");
  const CollectiveCall call{"broadcast", &t, {}, root, t.numel(), t.numel(), t.bytes()};
  auto steps = [&] { broadcast_steps(t, root); };
  ctx_.clock.wait_compute_until(collective(call, steps));
}

void AlgorithmicComm::barrier() {
  const CollectiveCall call{"barrier"};
  auto steps = [&] { algorithms::dissemination_barrier(*this); };
  ctx_.clock.wait_compute_until(collective(call, steps));
}

}  // namespace mgpu::comm

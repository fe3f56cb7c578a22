// What an NCCL operation's trace event says and when it ran, on the rank's clock. NCCL moves the
// bytes itself, so no message of it is seen here: the event's bytes and sent_bytes follow the
// shared algorithms' rule (algorithms/sent_bytes.h), and its times come from the run's clock:
//  - modeled: the cost model's time for the group's members starting together (cost_model.h's
//    member_end_times, as the local backend would charge them), from this rank's issue time, on
//    the comm lane; a receive, not knowing when its message left, ends one transfer after it is
//    posted;
//  - wall: host time, from the issue to the moment the host sees the operation complete;
//  - cuda: two CUDA events recorded on the comm stream around the operation, placed on the
//    rank's wall axis by an anchor event that the host waited for.
#pragma once
#include <cuda_runtime.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/context.h"
#include "core/trace/event.h"

namespace mgpu::comm::nccl {

// A timing CUDA event recorded on a stream; destroyed with its owner (move-only).
class StreamEvent {
 public:
  StreamEvent() = default;
  explicit StreamEvent(cudaStream_t stream);
  StreamEvent(StreamEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  StreamEvent& operator=(StreamEvent&& other) noexcept;
  ~StreamEvent();
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// One operation, from before it is enqueued to its trace event.
struct TimedOp {
  trace::Event event;
  std::optional<Tracer::CommLabel> label;  // the comm label when it was issued
  double end = 0;                          // modeled: when it ends on the comm lane
  StreamEvent started;                     // cuda clock: recorded before the operation is enqueued
  StreamEvent ended;                       // and after it
};

class CommTimeline {
 public:
  // `members`: the group's world ranks in group-rank order; this rank is members[rank].
  CommTimeline(RankContext& ctx, cudaStream_t stream, std::string group, std::vector<int> members,
               int rank);

  // ---- what the event says
  // The group's next collective (it takes the next number of the group's sequence).
  trace::Event collective(const char* kind, int64_t bytes, int64_t sent_bytes);
  // split() is numbered like a collective, as on the other backends.
  void count_split() { ++seq_; }
  // A message to or from group rank `peer`.
  trace::Event point_to_point(const char* kind, int64_t bytes, int64_t sent_bytes, int peer) const;

  // ---- its modeled seconds (0 on the other clocks)
  double modeled(const char* kind, int64_t elements, int elem_bytes, int root = 0) const;
  double modeled_all_to_all_v(std::span<const int64_t> send_counts,
                              std::span<const int64_t> recv_counts, int elem_bytes) const;
  double modeled_transfer(int peer, int64_t bytes) const;

  // ---- when it ran
  // Before the operation is enqueued on the stream: its issue time; on the modeled clock the
  // comm lane is busy for `modeled_seconds` from then.
  TimedOp begin(trace::Event event, double modeled_seconds);
  // Right after the operation is enqueued.
  void enqueued(TimedOp& op) const;
  // Once the stream has finished it: its times and its trace event; returns its end on the
  // rank's clock (what a blocking call or Work::wait makes the compute lane wait for).
  double finish(TimedOp& op) const;

 private:
  bool uses_events() const;
  double on_rank_clock(const StreamEvent& e) const;

  RankContext& ctx_;
  cudaStream_t stream_;
  std::string group_;
  std::vector<int> members_;
  int rank_;
  int64_t seq_ = 0;
  StreamEvent anchor_;      // recorded, and waited for, on the first timed operation
  double anchor_time_ = 0;  // the rank clock's reading once the anchor had completed
};

}  // namespace mgpu::comm::nccl

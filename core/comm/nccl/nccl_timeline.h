// What an NCCL operation's trace event says and when it ran, on the rank's clock. NCCL moves the
// bytes itself, so no message of it is seen here: the event's bytes and sent_bytes follow the
// shared algorithms' rule (algorithms/sent_bytes.h), and its times come from the run's clock:
//  - modeled: what the local backend's messages would take: a collective ends when
//    cost_model.h's member_end_times says, from every member's issue time (the ranks post them on
//    an IssueBoard, issue_board.h: NCCL's ranks are threads of one process), a send one transfer
//    after its issue, a receive one transfer after its message left or when it is posted if
//    later; on the comm lane, as there;
//  - wall: host time, from the issue to the moment the host sees the operation complete;
//  - cuda: two CUDA events recorded on the comm stream around the operation, placed on the
//    rank's wall axis by an anchor event that the host waited for.
#pragma once
#include <cuda_runtime.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/comm/issue_board.h"
#include "core/runtime/context.h"
#include "core/runtime/trace_event.h"

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
  int sender = -1;      // modeled receive: the sender's group rank, whose send time ends it,
  int64_t message = 0;  // the message's number from that sender
  double transfer = 0;  // and its time on the link
  StreamEvent started;  // cuda clock: recorded before the operation is enqueued
  StreamEvent ended;    // and after it
};

class CommTimeline {
 public:
  // `members`: the group's world ranks in group-rank order; this rank is members[rank]. `key`
  // names the group for its IssueBoard (the same on every member); `timeout`: seconds a member
  // waits there for the others.
  CommTimeline(RankContext& ctx, cudaStream_t stream, std::string group, std::vector<int> members,
               int rank, const std::string& key, double timeout);

  // ---- what the event says
  // The group's next collective (it takes the next number of the group's sequence).
  trace::Event collective(const char* kind, int64_t bytes, int64_t sent_bytes);
  // split() is numbered like a collective, as on the other backends; returns its number.
  int64_t count_split() { return seq_++; }
  // A message to or from group rank `peer`.
  trace::Event point_to_point(const char* kind, int64_t bytes, int64_t sent_bytes, int peer) const;

  // ---- its modeled seconds from its issue (0 on the other clocks)
  // The collective whose event was made last: the members' issue times meet on the board.
  double modeled(const char* kind, int64_t elements, int elem_bytes, int root = 0);
  // From this member's counts alone (its partners' are not on the board).
  double modeled_all_to_all_v(std::span<const int64_t> send_counts,
                              std::span<const int64_t> recv_counts, int elem_bytes) const;

  // ---- when it ran
  // Before the operation is enqueued on the stream: its issue time; on the modeled clock the
  // comm lane is busy for `modeled_seconds` from then.
  TimedOp begin(trace::Event event, double modeled_seconds);
  // The same for a message to / from group rank `peer` of `bytes`.
  TimedOp begin_send(trace::Event event, int peer, int64_t bytes);
  TimedOp begin_recv(trace::Event event, int peer, int64_t bytes);
  // Right after the operation is enqueued.
  void enqueued(TimedOp& op) const;
  // Once the stream has finished it: its times and its trace event; returns its end on the
  // rank's clock (what a blocking call or Work::wait makes the compute lane wait for).
  double finish(TimedOp& op) const;

 private:
  bool uses_events() const;
  double on_rank_clock(const StreamEvent& e) const;
  double transfer_seconds(int peer, int64_t bytes) const;

  RankContext& ctx_;
  cudaStream_t stream_;
  std::string group_;
  std::vector<int> members_;
  int rank_;
  int64_t seq_ = 0;
  std::shared_ptr<IssueBoard> board_;             // on the modeled clock
  std::vector<int64_t> sent_to_, received_from_;  // messages so far, per group rank
  double timeout_;
  StreamEvent anchor_;      // recorded, and waited for, on the first timed operation
  double anchor_time_ = 0;  // the rank clock's reading once the anchor had completed
};

}  // namespace mgpu::comm::nccl

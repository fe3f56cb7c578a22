// The NCCL comm's trace events and clock (nccl_timeline.h). The cuda clock's anchor is read once
// per communicator: the host reads its clock right after the anchor event completes, so every
// event placed from it may be late by the few microseconds that takes, never early.
#include "core/comm/nccl/nccl_timeline.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "core/comm/cost_model.h"
#include "core/runtime/cuda/streams.h"

namespace mgpu::comm::nccl {

StreamEvent::StreamEvent(cudaStream_t stream) {
  cuda::check(cudaEventCreate(&event_), "cudaEventCreate");
  cuda::check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

StreamEvent& StreamEvent::operator=(StreamEvent&& other) noexcept {
  std::swap(event_, other.event_);
  return *this;
}

StreamEvent::~StreamEvent() {
  if (event_) cudaEventDestroy(event_);  // a pending event is released once it completes
}

CommTimeline::CommTimeline(RankContext& ctx, cudaStream_t stream, std::string group,
                           std::vector<int> members, int rank, const std::string& key,
                           double timeout)
    : ctx_(ctx),
      stream_(stream),
      group_(std::move(group)),
      members_(std::move(members)),
      rank_(rank),
      board_(ctx.clock.modeled() ? IssueBoard::of_group(key) : nullptr),
      sent_to_(members_.size(), 0),
      received_from_(members_.size(), 0),
      timeout_(timeout) {}

trace::Event CommTimeline::collective(const char* kind, int64_t bytes, int64_t sent_bytes) {
  trace::Event e = trace::comm_event(kind, 0, 0, bytes, sent_bytes, group_);
  e.seq = seq_++;
  return e;
}

trace::Event CommTimeline::point_to_point(const char* kind, int64_t bytes, int64_t sent_bytes,
                                          int peer) const {
  trace::Event e = trace::comm_event(kind, 0, 0, bytes, sent_bytes, group_);
  e.peer = members_.at(peer);
  return e;
}

double CommTimeline::modeled(const char* kind, int64_t elements, int elem_bytes, int root) {
  if (!ctx_.clock.modeled()) return 0;
  const double issued = ctx_.clock.comm_issue_time();
  const std::vector<double> starts = board_->collective_starts(
      seq_ - 1, rank_, static_cast<int>(members_.size()), issued, timeout_,
      fmt::format("{} #{} of group {}", kind, seq_ - 1, group_));
  return member_end_times(kind, members_, elements, elem_bytes, root, ctx_.profile, starts)[rank_] -
         issued;
}

double CommTimeline::modeled_all_to_all_v(std::span<const int64_t> send_counts,
                                          std::span<const int64_t> recv_counts,
                                          int elem_bytes) const {
  if (!ctx_.clock.modeled()) return 0;
  return all_to_all_v_member_time(members_, rank_, send_counts, recv_counts, elem_bytes,
                                  ctx_.profile);
}

double CommTimeline::transfer_seconds(int peer, int64_t bytes) const {
  return ctx_.profile.transfer_time(members_[rank_], members_.at(peer), static_cast<double>(bytes));
}

TimedOp CommTimeline::begin_send(trace::Event event, int peer, int64_t bytes) {
  if (!ctx_.clock.modeled()) return begin(std::move(event), 0);
  board_->post_send(rank_, peer, sent_to_.at(peer)++, ctx_.clock.comm_issue_time());
  return begin(std::move(event), transfer_seconds(peer, bytes));
}

// A receive moves the comm lane only once its message's send time is known (finish), as the
// local backend's receive does at its end.
TimedOp CommTimeline::begin_recv(trace::Event event, int peer, int64_t bytes) {
  TimedOp op = begin(std::move(event), 0);
  if (ctx_.clock.modeled()) {
    op.sender = peer;
    op.message = received_from_.at(peer)++;
    op.transfer = transfer_seconds(peer, bytes);
  }
  return op;
}

bool CommTimeline::uses_events() const {
  return ctx_.clock.kind() == ClockKind::cuda && ctx_.tracer.enabled;
}

TimedOp CommTimeline::begin(trace::Event event, double modeled_seconds) {
  TimedOp op;
  op.event = std::move(event);
  op.label = ctx_.tracer.comm_label;
  RankClock& clock = ctx_.clock;
  op.event.start = clock.comm_issue_time();
  if (clock.modeled()) {
    op.end = op.event.start + modeled_seconds;
    clock.wait_comm_until(op.end);
  }
  if (uses_events()) {
    if (!anchor_.get()) {
      anchor_ = StreamEvent(stream_);
      cuda::check(cudaEventSynchronize(anchor_.get()), "cudaEventSynchronize(anchor)");
      anchor_time_ = clock.wall_now();
    }
    op.started = StreamEvent(stream_);
  }
  return op;
}

void CommTimeline::enqueued(TimedOp& op) const {
  if (op.started.get()) op.ended = StreamEvent(stream_);
}

double CommTimeline::on_rank_clock(const StreamEvent& e) const {
  float ms = 0;
  cuda::check(cudaEventElapsedTime(&ms, anchor_.get(), e.get()), "cudaEventElapsedTime");
  return anchor_time_ + static_cast<double>(ms) * 1e-3;
}

double CommTimeline::finish(TimedOp& op) const {
  double end = ctx_.clock.modeled() ? op.end : ctx_.clock.wall_now();
  if (op.sender >= 0) {  // the data has arrived, so its send time is on the board
    const double sent = board_->take_send(op.sender, rank_, op.message, timeout_,
                                          fmt::format("message #{}", op.message));
    const double posted = op.event.start;
    end = std::max(posted, sent + op.transfer);
    op.event.wait = std::clamp(sent - posted, 0.0, end - posted);
    ctx_.clock.wait_comm_until(end);
  }
  if (op.started.get() && op.ended.get()) {
    op.event.start = on_rank_clock(op.started);
    end = std::max(op.event.start, on_rank_clock(op.ended));
  }
  op.event.dur = end - op.event.start;
  // An async operation is recorded when waited for, maybe outside the label it was issued under.
  std::optional<Tracer::CommLabel> now = std::exchange(ctx_.tracer.comm_label, op.label);
  ctx_.tracer.record(std::move(op.event));
  ctx_.tracer.comm_label = std::move(now);
  return end;
}

}  // namespace mgpu::comm::nccl

// The local backend: ranks are threads of one process. Messages meet in per-(src, dst, tag) FIFO
// mailboxes and cost one copy, sender's buffer to receiver's (local_world.h). This file is only
// the point-to-point layer: every collective is a shared algorithm on top of it (AlgorithmicComm,
// core/comm/algorithms/), so its modeled time and the bytes it puts on the wire (trace
// sent_bytes) emerge from its messages.
//
// Modeled clock: a message carries its sender's issue time; the sender's comm lane is busy for
// the transfer; a receive ends at max(posted, sent + transfer). Blocking ops then make the
// compute lane wait; async ones do so in Work::wait().
#include <algorithm>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithmic_comm.h"
#include "core/comm/local/local_world.h"

namespace mgpu::comm::local {

class LocalComm final : public AlgorithmicComm {
 public:
  LocalComm(std::shared_ptr<LocalWorld> world, RankContext& ctx, std::string group_key,
            std::string name, std::vector<int> members, int rank, AllReduceFn all_reduce)
      : AlgorithmicComm(ctx, std::move(name), std::move(members), rank, std::move(all_reduce)),
        world_(std::move(world)),
        group_key_(std::move(group_key)) {}

  std::string backend() const override { return "local"; }

  // ---- point-to-point ----
  void send(const Tensor& t, int dst, int tag) override { send_now(outgoing(t), dst, tag); }
  void recv(Tensor& t, int src, int tag) override { receive_now(incoming(t), src, tag); }

  // Host messages: their bytes, as they are.
  void send_host(const HostMessage& m, int dst, int tag) override {
    send_now({m.data, m.bytes(), DeviceKind::cpu}, dst, tag);
  }
  void recv_host(const HostMessage& m, int src, int tag) override {
    receive_now({m.data, m.bytes(), DeviceKind::cpu}, src, tag);
  }

  // The receiver's buffer is the sum's target: whichever side comes second adds the sender's
  // values straight into it (local_world.h). Host f32 only; a CUDA or 16-bit buffer takes Comm's
  // recv into a temporary + add.
  void recv_reduce(Tensor& accumulate, int src, int tag) override {
    if (accumulate.device().kind == DeviceKind::cuda || accumulate.dtype() != DType::f32)
      return Comm::recv_reduce(accumulate, src, tag);
    receive_now(incoming(accumulate, true), src, tag);
  }

  // The receiver may copy from `t` until wait(): like MPI, t must not change before then.
  Work isend(const Tensor& t, int dst, int tag) override {
    return on_wait([this, posted = post(outgoing(t), dst, tag)] {
      world_->release(posted.key, posted.offer);
      compute_waits_for(posted.end);
    });
  }

  // The sender may copy into `t` from now on; its value is defined after wait().
  Work irecv(Tensor& t, int src, int tag) override {
    check_peer(src, "irecv from");
    MailboxKey key = mailbox(src, rank(), tag);
    const int64_t ticket = world_->reserve(key, incoming(t));
    const double posted = ctx().clock.comm_issue_time();
    // `target` shares storage with the caller's tensor.
    return on_wait([this, target = t, key = std::move(key), ticket, posted, src, tag]() mutable {
      Arrived m = world_->take(key, ticket, my_world_rank(), waiting_for(key));
      compute_waits_for(received(target.bytes(), key, m, posted, src, tag));
    });
  }

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override;

 private:
  // The members check each collective call in the world's registry.
  void agree_on_call(int64_t seq, const CollectiveCall& call) override {
    world_->check_collective(group_key_, this->name(), seq, size(), my_world_rank(),
                             call.describe());
  }

  // Every member's counts meet in the world (a rendezvous, off the modeled clock); each member
  // checks the same matrices, so a mismatch is the same CommError on all of them.
  void agree_on_counts(int64_t seq, std::span<const int64_t> send_counts,
                       std::span<const int64_t> recv_counts) override {
    std::vector<int64_t> mine(send_counts.begin(), send_counts.end());
    mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
    const auto all = world_->gather(
        group_key_ + "/all_to_all_v", seq, members(), rank(), std::move(mine),
        fmt::format("waits for the counts of all_to_all_v #{} in group {}", seq, name()));
    const int n = size();
    std::vector<int64_t> send, recv;
    for (const auto& member : all) {
      send.insert(send.end(), member.begin(), member.begin() + n);
      recv.insert(recv.end(), member.begin() + n, member.end());
    }
    check_all_to_all_v_counts(send, recv, n, members(), name(), seq);
  }

  MailboxKey mailbox(int src, int dst, int tag) const {
    return {group_key_, world_rank(src), world_rank(dst), tag, in_collective()};
  }

  // A message handed to the world: release() it before the sent tensor may change.
  struct Posted {
    MailboxKey key;
    LocalWorld::Offer offer;
    double end = 0;  // when the transfer ends on this rank's clock
  };

  // A tensor's bytes (none for phantom tensors, which have shapes but no data).
  static Outgoing outgoing(const Tensor& t) {
    return {t.has_data() ? t.raw() : nullptr, t.bytes(), t.device().kind};
  }
  static Incoming incoming(Tensor& t, bool accumulate = false) {
    return {t.has_data() ? t.raw() : nullptr, t.bytes(), t.device().kind, accumulate};
  }

  void send_now(const Outgoing& message, int dst, int tag) {
    Posted posted = post(message, dst, tag);
    world_->release(posted.key, posted.offer);
    compute_waits_for(posted.end);
  }

  // A blocking receive: into the target, or added into it (recv_reduce); the same clock and trace.
  void receive_now(const Incoming& target, int src, int tag) {
    check_peer(src, "recv from");
    MailboxKey key = mailbox(src, rank(), tag);
    double posted = ctx().clock.comm_issue_time();
    Arrived m = world_->receive(key, target, my_world_rank(), waiting_for(key));
    compute_waits_for(received(target.bytes, key, m, posted, src, tag));
  }

  // Offers the message to dst's mailbox; the transfer ends at `end` on the modeled clock. This is
  // the one place bytes leave a rank, so it is where they are counted for the trace.
  Posted post(Outgoing message, int dst, int tag) {
    check_peer(dst, "send to");
    RankClock& clock = ctx().clock;
    const int64_t bytes = message.bytes;
    message.sent = clock.comm_issue_time();
    double transfer = ctx().profile.transfer_time(my_world_rank(), world_rank(dst), bytes);
    Posted posted;
    posted.key = mailbox(rank(), dst, tag);
    posted.offer = world_->post(posted.key, message);
    posted.end = clock.modeled() ? message.sent + transfer : clock.wall_now();
    clock.wait_comm_until(posted.end);
    count_sent(bytes);
    record_p2p("send", dst, bytes, bytes, message.sent, posted.end);
    return posted;
  }

  // What a rank blocked in this receive is shown as in the deadlock and timeout tables. (Two
  // pointers: small enough for std::function to hold without allocating.)
  std::function<std::string()> waiting_for(const MailboxKey& key) const {
    return [this, &key] {
      return in_collective() ? fmt::format("waits in {} #{} of group {} (recv from rank {})",
                                           collective_kind(), collective_seq(), name(), key.src)
                             : fmt::format("waits for recv from rank {} (tag {}) in group {}",
                                           key.src, key.tag, name());
    };
  }

  // The end of a receive whose message m has arrived: checks its size, moves the clock, traces.
  double received(int64_t holds, const MailboxKey& key, const Arrived& m, double posted, int src,
                  int tag) {
    if (m.bytes != holds)
      throw CommError(fmt::format(
          "rank {} received {} bytes from rank {} (tag {}) in group {}, but its buffer holds {}",
          my_world_rank(), m.bytes, key.src, tag, name(), holds));
    const double transfer = ctx().profile.transfer_time(key.src, key.dst, m.bytes);
    return receive_ends(src, m.bytes, posted, m.sent, transfer, /*sent_on_my_clock=*/true);
  }

  std::shared_ptr<LocalWorld> world_;
  std::string group_key_;  // unique id shared by the members (mailboxes and checks use it)
};

std::unique_ptr<Comm> LocalComm::split(int color, int key, const std::string& name) {
  const int64_t seq = next_seq();
  world_->check_collective(group_key_, this->name(), seq, size(), my_world_rank(), "split()");
  auto values = world_->exchange(group_key_, seq, members(), rank(), {color, key},
                                 fmt::format("waits in split #{} of group {}", seq, this->name()));
  if (color < 0) return nullptr;            // like MPI_UNDEFINED: this rank joins no group
  std::vector<std::pair<int, int>> chosen;  // (key, world rank)
  for (int i = 0; i < size(); ++i)
    if (values[i].first == color) chosen.emplace_back(values[i].second, members()[i]);
  std::sort(chosen.begin(), chosen.end());
  std::vector<int> group;
  int my_rank = 0;
  for (auto [k, w] : chosen) {
    if (w == my_world_rank()) my_rank = static_cast<int>(group.size());
    group.push_back(w);
  }
  return std::make_unique<LocalComm>(
      world_, ctx(), fmt::format("{}/{}:{}", group_key_, seq, color),
      name.empty() ? fmt::format("{}.{}", this->name(), color) : name, std::move(group), my_rank,
      all_reduce_algorithm());
}

std::vector<std::unique_ptr<Comm>> make_local_world_comms(std::shared_ptr<LocalWorld> world,
                                                          const std::vector<RankContext*>& ranks,
                                                          const AllReduceFn& all_reduce) {
  std::vector<int> members(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) members[r] = static_cast<int>(r);
  std::vector<std::unique_ptr<Comm>> comms;
  for (size_t r = 0; r < ranks.size(); ++r)
    comms.push_back(std::make_unique<LocalComm>(world, *ranks[r], "world", "world", members,
                                                static_cast<int>(r), all_reduce));
  return comms;
}

}  // namespace mgpu::comm::local

// The local backend: ranks are threads of one process. Messages meet in per-(src, dst, tag) FIFO
// mailboxes and cost one copy, sender's buffer to receiver's (local_world.h); every collective
// is an algorithm on top of send/recv (algorithms.h, and the all-reduce seam), so its modeled
// time and the bytes it puts on the wire (trace sent_bytes) emerge from its messages.
//
// Modeled clock: a message carries its sender's issue time; the sender's comm lane is busy for
// the transfer; a receive ends at max(posted, sent + transfer). Blocking ops then make the
// compute lane wait; async ones do so in Work::wait().
#include <algorithm>

#include <fmt/format.h>

#include "core/comm/local/algorithms.h"
#include "core/comm/local/local_world.h"
#include "core/comm/seams.h"

namespace mgpu::comm::local {

class LocalComm final : public Comm {
 public:
  LocalComm(std::shared_ptr<LocalWorld> world, RankContext* ctx, std::string group_key,
            std::string name, std::vector<int> members, int rank)
      : world_(std::move(world)),
        ctx_(ctx),
        group_key_(std::move(group_key)),
        name_(std::move(name)),
        members_(std::move(members)),
        rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int world_rank(int group_rank) const override { return members_.at(group_rank); }
  std::string name() const override { return name_; }
  std::string backend() const override { return "local"; }

  // ---- point-to-point ----
  void send(const Tensor& t, int dst, int tag) override {
    Posted posted = post(t, dst, tag);
    world_->release(posted.key, posted.offer);
    compute_waits_for(posted.end);
  }

  void recv(Tensor& t, int src, int tag) override { receive_now(t, src, tag, false); }

  // The receiver's buffer is the sum's target: whichever side comes second adds the sender's
  // values straight into it (local_world.h). Host f32 only; a CUDA or 16-bit buffer takes Comm's
  // recv into a temporary + add.
  void recv_reduce(Tensor& accumulate, int src, int tag) override {
    if (accumulate.device().kind == DeviceKind::cuda || accumulate.dtype() != DType::f32)
      return Comm::recv_reduce(accumulate, src, tag);
    receive_now(accumulate, src, tag, true);
  }

  // The receiver may copy from `t` until wait(): like MPI, t must not change before then.
  Work isend(const Tensor& t, int dst, int tag) override {
    struct PendingSend : Work::Impl {
      LocalComm* comm;
      Posted posted;
      void wait() override {
        comm->world_->release(posted.key, posted.offer);
        comm->compute_waits_for(posted.end);
      }
    };
    auto pending = std::make_unique<PendingSend>();
    pending->comm = this;
    pending->posted = post(t, dst, tag);
    return Work(std::move(pending));
  }

  // The sender may copy into `t` from now on; its value is defined after wait().
  Work irecv(Tensor& t, int src, int tag) override {
    check_peer(src, "irecv from");
    struct PendingRecv : Work::Impl {
      LocalComm* comm;
      Tensor target;  // shares storage with the caller's tensor
      MailboxKey key;
      int64_t ticket;
      double posted;
      int src, tag;
      void wait() override {
        Arrived m = comm->world_->take(key, ticket, comm->my_world_rank(), comm->waiting_for(key));
        comm->compute_waits_for(comm->received(target, key, m, posted, src, tag));
      }
    };
    auto pending = std::make_unique<PendingRecv>();
    pending->comm = this;
    pending->target = t;
    pending->key = mailbox(src, rank_, tag);
    pending->ticket = world_->reserve(pending->key, incoming(t));
    pending->posted = ctx_->clock.comm_issue_time();
    pending->src = src;
    pending->tag = tag;
    return Work(std::move(pending));
  }

  // ---- collectives ----
  void all_reduce(Tensor& t, ReduceOp op) override {
    ctx_->clock.wait_compute_until(all_reduce_on_comm_lane(t, op));
  }

  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    // Runs now, in this thread, but on the modeled clock only the comm lane is busy until the
    // caller waits: that is what lets DDP overlap gradient buckets with backward compute.
    return wait_until(all_reduce_on_comm_lane(t, op));
  }

  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    ctx_->clock.wait_compute_until(reduce_scatter_on_comm_lane(in, out, op));
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return wait_until(reduce_scatter_on_comm_lane(in, out, op));  // runs now, like all_reduce_async
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    ctx_->clock.wait_compute_until(all_gather_on_comm_lane(in, out));
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    return wait_until(all_gather_on_comm_lane(in, out));
  }

  void all_to_all(const Tensor& in, Tensor& out) override {
    check_all_to_all_sizes(in, out, size(), rank_, name_);
    double finish = collective("all_to_all", describe_collective("all_to_all", &in, nullptr),
                               in.bytes(), [&] { pairwise_all_to_all(*this, in, out); });
    ctx_->clock.wait_compute_until(finish);
  }

  void broadcast(Tensor& t, int root) override {
    check_peer(root, "broadcast from root");
    double finish = collective("broadcast", describe_collective("broadcast", &t, nullptr, root),
                               t.bytes(), [&] { tree_broadcast(*this, t, root); });
    ctx_->clock.wait_compute_until(finish);
  }

  void barrier() override {
    double finish = collective("barrier", describe_collective("barrier", nullptr, nullptr), 0,
                               [&] { dissemination_barrier(*this); });
    ctx_->clock.wait_compute_until(finish);
  }

  std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
    int64_t seq = seq_++;
    world_->check_collective(group_key_, name_, seq, size(), my_world_rank(), "split()");
    auto values = world_->exchange(group_key_, seq, members_, rank_, {color, key},
                                   fmt::format("waits in split #{} of group {}", seq, name_));
    if (color < 0) return nullptr;            // like MPI_UNDEFINED: this rank joins no group
    std::vector<std::pair<int, int>> chosen;  // (key, world rank)
    for (int i = 0; i < size(); ++i)
      if (values[i].first == color) chosen.emplace_back(values[i].second, members_[i]);
    std::sort(chosen.begin(), chosen.end());
    std::vector<int> members;
    int my_rank = 0;
    for (auto [k, w] : chosen) {
      if (w == my_world_rank()) my_rank = static_cast<int>(members.size());
      members.push_back(w);
    }
    return std::make_unique<LocalComm>(
        world_, ctx_, fmt::format("{}/{}:{}", group_key_, seq, color),
        name.empty() ? fmt::format("{}.{}", name_, color) : name, std::move(members), my_rank);
  }

 private:
  int my_world_rank() const { return members_[rank_]; }

  // A blocking p2p makes the compute lane wait for it, except inside a collective: there only
  // the comm lane moves, and the collective decides (blocking now, async at Work::wait()).
  void compute_waits_for(double end) {
    if (depth_ == 0) ctx_->clock.wait_compute_until(end);
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(fmt::format("rank {} of group {} ({} ranks): {} rank {} is out of range",
                                  rank_, name_, size(), what, peer));
  }

  MailboxKey mailbox(int src, int dst, int tag) const {
    return {group_key_, world_rank(src), world_rank(dst), tag, depth_ > 0};
  }

  // A message handed to the world: release() it before the sent tensor may change.
  struct Posted {
    MailboxKey key;
    LocalWorld::Offer offer;
    double end = 0;  // when the transfer ends on this rank's clock
  };

  static Incoming incoming(Tensor& t, bool accumulate = false) {
    return {t.has_data() ? t.raw() : nullptr, t.bytes(), t.device().kind, accumulate};
  }

  // A blocking receive: into t, or added into t (recv_reduce); the same clock and trace.
  void receive_now(Tensor& t, int src, int tag, bool accumulate) {
    check_peer(src, "recv from");
    MailboxKey key = mailbox(src, rank_, tag);
    double posted = ctx_->clock.comm_issue_time();
    Arrived m = world_->receive(key, incoming(t, accumulate), my_world_rank(), waiting_for(key));
    compute_waits_for(received(t, key, m, posted, src, tag));
  }

  // Offers t to dst's mailbox; the transfer ends at `end` on the modeled clock. This is the one
  // place bytes leave a rank, so it is where they are counted for the trace.
  Posted post(const Tensor& t, int dst, int tag) {
    check_peer(dst, "send to");
    RankClock& clock = ctx_->clock;
    double sent = clock.comm_issue_time();
    double transfer = ctx_->profile.transfer_time(my_world_rank(), world_rank(dst), t.bytes());
    Posted posted;
    posted.key = mailbox(rank_, dst, tag);
    posted.offer = world_->post(
        posted.key, {t.has_data() ? t.raw() : nullptr, t.bytes(), t.device().kind, sent});
    posted.end = clock.modeled() ? sent + transfer : clock.wall_now();
    clock.wait_comm_until(posted.end);
    sent_bytes_ += t.bytes();
    record_p2p("send", dst, t.bytes(), t.bytes(), sent, posted.end);
    return posted;
  }

  // What a rank blocked in this receive is shown as in the deadlock and timeout tables. (Two
  // pointers: small enough for std::function to hold without allocating.)
  std::function<std::string()> waiting_for(const MailboxKey& key) const {
    return [this, &key] {
      return depth_ > 0 ? fmt::format("waits in {} #{} of group {} (recv from rank {})",
                                      collective_kind_, collective_seq_, name_, key.src)
                        : fmt::format("waits for recv from rank {} (tag {}) in group {}", key.src,
                                      key.tag, name_);
    };
  }

  // The end of a receive whose message m has arrived: checks its size, moves the clock, traces.
  double received(Tensor& t, const MailboxKey& key, const Arrived& m, double posted, int src,
                  int tag) {
    if (m.bytes != t.bytes())
      throw CommError(fmt::format(
          "rank {} received {} bytes from rank {} (tag {}) in group {}, but its buffer holds {}",
          my_world_rank(), m.bytes, key.src, tag, name_, t.bytes()));
    RankClock& clock = ctx_->clock;
    double transfer = ctx_->profile.transfer_time(key.src, key.dst, m.bytes);
    double end = clock.modeled() ? std::max(posted, m.sent + transfer) : clock.wall_now();
    clock.wait_comm_until(end);
    record_p2p("recv", src, m.bytes, 0, posted, end);
    return end;
  }

  void record_p2p(const char* op, int peer, int64_t bytes, int64_t sent_bytes, double start,
                  double end) {
    // Part of a collective, which records one event for all of it; or not tracing.
    if (depth_ > 0 || !ctx_->tracer.enabled) return;
    trace::Event e = trace::comm_event(op, start, end, bytes, sent_bytes, name_);
    e.peer = world_rank(peer);
    ctx_->tracer.record(std::move(e));
  }

  double all_reduce_on_comm_lane(Tensor& t, ReduceOp op) {
    return collective("all_reduce", describe_collective("all_reduce", &t, &op), t.bytes(),
                      [&] { comm_seams().all_reduce(*this, t, op); });
  }

  double reduce_scatter_on_comm_lane(const Tensor& in, Tensor& out, ReduceOp op) {
    check_my_chunk(*this, "reduce_scatter", "out", out.numel(), in.numel());
    return collective("reduce_scatter", describe_collective("reduce_scatter", &in, &op), in.bytes(),
                      [&] { ring_reduce_scatter_into(*this, in, out, op, &ctx_->allocator); });
  }

  double all_gather_on_comm_lane(const Tensor& in, Tensor& out) {
    check_my_chunk(*this, "all_gather", "in", in.numel(), out.numel());
    return collective("all_gather", describe_collective("all_gather", &out, nullptr), out.bytes(),
                      [&] { ring_all_gather_from(*this, in, out); });
  }

  // Checks the call against the other members, runs `body` (sends/recvs on the comm lane),
  // records one trace event, and returns the collective's end time on this rank.
  template <class Body>
  double collective(const char* kind, const std::string& call, int64_t bytes, Body&& body) {
    RankClock& clock = ctx_->clock;
    if (depth_ > 0) {  // a collective used inside another one is part of it
      body();
      return clock.comm_now();
    }
    int64_t seq = seq_++;
    world_->check_collective(group_key_, name_, seq, size(), my_world_rank(), call);
    double start = clock.comm_issue_time();
    const int64_t sent_before = sent_bytes_;
    collective_kind_ = kind;  // for the deadlock table, which formats them only when it is shown
    collective_seq_ = seq;
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    body();
    double end = clock.modeled() ? std::max(start, clock.comm_now()) : clock.wall_now();
    clock.wait_comm_until(end);
    if (ctx_->tracer.enabled) {  // sent_bytes: what this rank's sends inside it carried
      trace::Event e = trace::comm_event(kind, start, end, bytes, sent_bytes_ - sent_before, name_);
      e.seq = seq;
      ctx_->tracer.record(std::move(e));
    }
    return end;
  }

  // A Work whose wait() makes the compute lane wait for `end`.
  Work wait_until(double end) {
    struct Done : Work::Impl {
      RankClock* clock;
      double end;
      void wait() override { clock->wait_compute_until(end); }
    };
    auto done = std::make_unique<Done>();
    done->clock = &ctx_->clock;
    done->end = end;
    return Work(std::move(done));
  }

  std::shared_ptr<LocalWorld> world_;
  RankContext* ctx_;
  std::string group_key_;     // unique id shared by the members (mailboxes and checks use it)
  std::string name_;          // for people: "world", "dp0"
  std::vector<int> members_;  // world ranks, in group-rank order
  int rank_;
  int64_t seq_ = 0;                   // this group's collective counter (same on every member)
  int depth_ = 0;                     // > 0 while inside a collective
  int64_t sent_bytes_ = 0;            // bytes this rank has sent in this group, ever
  const char* collective_kind_ = "";  // the collective this rank is in, while depth_ > 0
  int64_t collective_seq_ = 0;
};

std::vector<std::unique_ptr<Comm>> make_local_world_comms(std::shared_ptr<LocalWorld> world,
                                                          const std::vector<RankContext*>& ranks) {
  std::vector<int> members(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) members[r] = static_cast<int>(r);
  std::vector<std::unique_ptr<Comm>> comms;
  for (size_t r = 0; r < ranks.size(); ++r)
    comms.push_back(std::make_unique<LocalComm>(world, ranks[r], "world", "world", members,
                                                static_cast<int>(r)));
  return comms;
}

}  // namespace mgpu::comm::local

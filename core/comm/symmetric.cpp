// The symmetric group (symmetric.h). Every collective runs the local backend's algorithm on this
// comm; only point-to-point differs: instead of meeting a partner in a mailbox, a message is
// priced as its mirror image. A send to the member d places ahead occupies the comm lane for this
// rank's own link, as in the local backend; the matching receive, from the member d places
// behind, ends when that member's mirror send (issued when this rank issued its own) has crossed
// the slowest link of the group at distance d.
//
// For a ring this is exact on the group's first member, the planner's representative: the ring's
// slowest link delays every step of the full run there too (whenever a group crosses nodes, the
// link into member 0 is an inter-node one). Patterns whose steps use other distances
// (dissemination barrier, pairwise all-to-all) are charged the slowest pair of every step, which
// a full run can beat when a slow step's senders were early: an upper bound there.
//
// Replays. What a collective does on this rank depends only on its call (kind, sizes, dtype,
// op, root) and its start: the algorithm's steps are timed from the moment it is issued. So the
// first call of each kind runs the algorithm and records its duration, the bytes it sent and the
// comm buffer it held at most; later identical calls replay that (the comm lane moves by the same
// duration, the same bytes are counted, a buffer of the same size is allocated and freed so the
// allocator's peaks move as they would). A tp group repeats one all-reduce four times per layer
// and micro-batch: thousands of runs of the ring become one.
#include "core/comm/symmetric.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/comm/cost_model.h"
#include "core/comm/local/algorithms.h"
#include "core/comm/seams.h"

namespace mgpu::comm {

namespace {

// Everything a collective's cost on this rank depends on, besides its start time.
struct Call {
  std::string kind;
  int64_t in_elements = 0, out_elements = 0;
  DType dtype = DType::f32;
  int op = -1, root = -1;
  auto operator<=>(const Call&) const = default;
};

// A collective's first run, to replay for the same call.
struct Replay {
  double duration = 0;
  int64_t sent_bytes = 0;
  int64_t transient_bytes = 0;  // the most it held at once, beyond what was there
  MemCategory transient_category = MemCategory::comm_buffers;
};

class SymmetricComm final : public Comm {
 public:
  SymmetricComm(RankContext& ctx, const HardwareProfile& profile, std::vector<int> members,
                int my_index, std::string name)
      : ctx_(ctx),
        profile_(profile),
        members_(std::move(members)),
        rank_(my_index),
        name_(std::move(name)) {
    if (!ctx_.clock.modeled())
      throw std::invalid_argument(fmt::format(
          "symmetric group {}: its members are not run, so only the modeled clock can time it",
          name_));
    if (rank_ < 0 || rank_ >= size())
      throw std::invalid_argument(
          fmt::format("symmetric group {}: index {} of {} members", name_, rank_, size()));
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int world_rank(int group_rank) const override { return members_.at(group_rank); }
  std::string name() const override { return name_; }
  std::string backend() const override { return "symmetric"; }

  // ---- point-to-point (inside collectives, and for symmetric patterns such as a K/V ring)
  void send(const Tensor& t, int dst, int tag) override { compute_waits_for(post(t, dst, tag)); }

  void recv(Tensor& t, int src, int tag) override {
    compute_waits_for(receive(t, src, tag, ctx_.clock.comm_issue_time()));
  }

  // As the local backend: an f32 sum is added straight from the sender's buffer (no temporary,
  // so no comm buffer to count); other types take Comm's recv into a temporary + add.
  void recv_reduce(Tensor& accumulate, int src, int tag) override {
    if (accumulate.dtype() != DType::f32) return Comm::recv_reduce(accumulate, src, tag);
    recv(accumulate, src, tag);
  }

  Work isend(const Tensor& t, int dst, int tag) override {
    return on_wait([this, end = post(t, dst, tag)] { compute_waits_for(end); });
  }

  // The mirror's message is matched at wait(), when this rank's own send of the step is known.
  Work irecv(Tensor& t, int src, int tag) override {
    return on_wait([this, target = t, src, tag, posted = ctx_.clock.comm_issue_time()]() mutable {
      compute_waits_for(receive(target, src, tag, posted));
    });
  }

  // ---- collectives: the local backend's algorithms, on this comm
  void all_reduce(Tensor& t, ReduceOp op) override {
    ctx_.clock.wait_compute_until(all_reduce_on_comm_lane(t, op));
  }
  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    return wait_until(all_reduce_on_comm_lane(t, op));
  }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    ctx_.clock.wait_compute_until(reduce_scatter_on_comm_lane(in, out, op));
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return wait_until(reduce_scatter_on_comm_lane(in, out, op));
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    ctx_.clock.wait_compute_until(all_gather_on_comm_lane(in, out));
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    return wait_until(all_gather_on_comm_lane(in, out));
  }

  void all_to_all(const Tensor& in, Tensor& out) override {
    check_all_to_all_sizes(in, out, size(), rank_, name_);
    require_phantom(out, "all_to_all");
    ctx_.clock.wait_compute_until(
        collective("all_to_all", {"all_to_all", in.numel(), out.numel(), in.dtype()}, in.bytes(),
                   [&] { local::pairwise_all_to_all(*this, in, out); }));
  }

  // A broadcast is not symmetric (the root sends, the others receive and forward): this rank's
  // sends are counted as the tree makes them, and the collective lasts until the last member of
  // the tree holds the data.
  void broadcast(Tensor& t, int root) override {
    require_phantom(t, "broadcast");
    if (root < 0 || root >= size())
      throw CommError(
          fmt::format("rank {} of group {} ({} ranks): broadcast from root rank {} is "
                      "out of range",
                      rank_, name_, size(), root));
    const Call call{"broadcast", t.numel(), t.numel(), t.dtype(), -1, root};
    const double finish = collective("broadcast", call, t.bytes(), [&] {
      const int v = (rank_ - root + size()) % size();
      for (int mask = 1; mask < size(); mask <<= 1)
        if (v < mask && v + mask < size()) sent_bytes_ += t.bytes();
      const double start = ctx_.clock.comm_issue_time();
      ctx_.clock.wait_comm_until(
          start + tree_broadcast_time(members_, root, static_cast<double>(t.bytes()), profile_));
    });
    ctx_.clock.wait_compute_until(finish);
  }

  void barrier() override {
    ctx_.clock.wait_compute_until(
        collective("barrier", {"barrier"}, 0, [&] { local::dissemination_barrier(*this); }));
  }

  std::unique_ptr<Comm> split(int, int, const std::string&) override {
    throw std::logic_error(fmt::format(
        "symmetric group {}: split() needs the other members, which are not run (the mesh "
        "builds every group of a representative world)",
        name_));
  }

 private:
  int distance_to(int peer) const { return (peer - rank_ + size()) % size(); }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError(fmt::format("rank {} of group {} ({} ranks): {} rank {} is out of range",
                                  rank_, name_, size(), what, peer));
  }

  void require_phantom(const Tensor& t, const char* op) const {
    if (t.has_data())
      throw CommError(fmt::format(
          "{} on symmetric group {}: the tensor holds values, but the group's other members are "
          "not run, so none could arrive; simulate on the phantom device",
          op, name_));
  }

  // Outside a collective a blocking operation makes the compute lane wait; inside one only the
  // comm lane moves and the collective decides (blocking now, async at Work::wait()).
  void compute_waits_for(double end) {
    if (depth_ == 0) ctx_.clock.wait_compute_until(end);
  }

  // Every member sends `bytes` to the member `distance` ahead at once; the slowest link paces the
  // step. (Memoised: a ring repeats the same few chunk sizes thousands of times.)
  double step_time(int distance, int64_t bytes) {
    auto [it, fresh] = step_times_.try_emplace({distance, bytes}, 0.0);
    if (fresh) it->second = slowest_step(members_, distance, static_cast<double>(bytes), profile_);
    return it->second;
  }

  // This rank's send occupies the comm lane for its own link, as in the local backend; the
  // mirror image of this message is on its way to this rank from the member `distance` behind.
  double post(const Tensor& t, int dst, int tag) {
    check_peer(dst, "send to");
    require_phantom(t, "send");
    const int distance = distance_to(dst);
    RankClock& clock = ctx_.clock;
    const double sent = clock.comm_issue_time();
    const double end = sent + profile_.transfer_time(members_[rank_], members_[dst],
                                                     static_cast<double>(t.bytes()));
    clock.wait_comm_until(end);
    mirror_sends_[{distance, tag}].push_back(sent);
    sent_bytes_ += t.bytes();
    record_p2p(trace::comm_event("send", sent, end, t.bytes(), t.bytes(), name_), dst);
    return end;
  }

  // The message from the member `distance` behind was sent when this rank sent its own message
  // `distance` ahead with the same tag. A receive with no such send (a pattern that is not
  // symmetric) takes the message as sent when the receive was posted.
  double receive(Tensor& t, int src, int tag, double posted) {
    check_peer(src, "recv from");
    require_phantom(t, "recv");
    const int distance = distance_to(src) == 0 ? 0 : size() - distance_to(src);
    double sent = posted;
    if (auto it = mirror_sends_.find({distance, tag});
        it != mirror_sends_.end() && !it->second.empty()) {
      sent = it->second.front();
      it->second.pop_front();
    }
    RankClock& clock = ctx_.clock;
    const double end = std::max(posted, sent + step_time(distance, t.bytes()));
    clock.wait_comm_until(end);
    record_p2p(trace::comm_event("recv", posted, end, t.bytes(), 0, name_), src);
    return end;
  }

  // Point-to-point on its own is an event; inside a collective, the collective records one.
  void record_p2p(trace::Event e, int peer) {
    if (depth_ > 0) return;
    e.peer = world_rank(peer);
    ctx_.tracer.record(std::move(e));
  }

  double all_reduce_on_comm_lane(Tensor& t, ReduceOp op) {
    require_phantom(t, "all_reduce");
    const Call call{"all_reduce", t.numel(), t.numel(), t.dtype(), static_cast<int>(op)};
    return collective("all_reduce", call, t.bytes(),
                      [&] { comm_seams().all_reduce(*this, t, op); });
  }

  double reduce_scatter_on_comm_lane(const Tensor& in, Tensor& out, ReduceOp op) {
    local::check_my_chunk(*this, "reduce_scatter", "out", out.numel(), in.numel());
    require_phantom(in, "reduce_scatter");
    const Call call{"reduce_scatter", in.numel(), out.numel(), in.dtype(), static_cast<int>(op)};
    return collective("reduce_scatter", call, in.bytes(), [&] {
      local::ring_reduce_scatter_into(*this, in, out, op, &ctx_.allocator);
    });
  }

  double all_gather_on_comm_lane(const Tensor& in, Tensor& out) {
    local::check_my_chunk(*this, "all_gather", "in", in.numel(), out.numel());
    require_phantom(out, "all_gather");
    return collective("all_gather", {"all_gather", in.numel(), out.numel(), out.dtype()},
                      out.bytes(), [&] { local::ring_all_gather_from(*this, in, out); });
  }

  // Runs `body` (the algorithm's sends and receives, on the comm lane) or replays its first run
  // for the same call, records one trace event as the local backend does, and returns the
  // collective's end on this rank.
  template <class Body>
  double collective(const char* kind, const Call& call, int64_t bytes, Body&& body) {
    RankClock& clock = ctx_.clock;
    if (depth_ > 0) {  // a collective used inside another one is part of it
      body();
      return clock.comm_now();
    }
    const double start = clock.comm_issue_time();
    const int64_t sent_before = sent_bytes_;
    if (auto it = replays_.find(call); it != replays_.end()) {
      replay(it->second, start);
    } else {
      ++depth_;
      struct Leave {
        int& depth;
        ~Leave() { --depth; }
      } leave{depth_};
      const std::optional<Replay> recorded = record(body);
      if (recorded) {
        Replay r = *recorded;
        r.duration = std::max(start, clock.comm_now()) - start;
        r.sent_bytes = sent_bytes_ - sent_before;
        replays_.emplace(call, r);
      }
    }
    const double end = std::max(start, clock.comm_now());
    clock.wait_comm_until(end);
    trace::Event e = trace::comm_event(kind, start, end, bytes, sent_bytes_ - sent_before, name_);
    e.seq = seq_++;
    ctx_.tracer.record(std::move(e));
    return end;
  }

  // Runs `body` while watching the allocator: the most it held beyond what was there before, in
  // one category. Empty when the run cannot be replayed (buffers of several categories at once,
  // or a message left unmatched).
  template <class Body>
  std::optional<Replay> record(Body&& body) {
    const MemoryStats before = ctx_.allocator.stats();
    CategoryBytes most{};
    RankContext& ctx = ctx_;
    ctx.allocator.set_listener([&](const MemoryStats& now) {
      for (int k = 0; k < kNumMemCategories; ++k)
        most[k] = std::max(most[k], now.current[k] - before.current[k]);
      ctx.tracer.record_memory(ctx.clock.compute_now(), now);
    });
    struct RestoreListener {  // the rank context's own: memory samples on the trace
      RankContext& ctx;
      ~RestoreListener() { ctx.trace_memory(); }
    } restore{ctx};
    const size_t unmatched = pending_mirror_sends();
    body();
    Replay r;
    for (int k = 0; k < kNumMemCategories; ++k) {
      if (most[k] <= 0) continue;
      if (r.transient_bytes > 0) return std::nullopt;
      r.transient_bytes = most[k];
      r.transient_category = static_cast<MemCategory>(k);
    }
    if (pending_mirror_sends() != unmatched) return std::nullopt;
    return r;
  }

  void replay(const Replay& r, double start) {
    ctx_.clock.wait_comm_until(start + r.duration);
    sent_bytes_ += r.sent_bytes;
    if (r.transient_bytes > 0)  // allocated and freed at once: the peaks move as in the run
      ctx_.allocator.allocate(r.transient_bytes, r.transient_category);
  }

  size_t pending_mirror_sends() const {
    size_t n = 0;
    for (const auto& [key, times] : mirror_sends_) n += times.size();
    return n;
  }

  // A Work whose wait() makes the compute lane wait for `end`.
  Work wait_until(double end) {
    return on_wait([clock = &ctx_.clock, end] { clock->wait_compute_until(end); });
  }

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

  RankContext& ctx_;
  HardwareProfile profile_;
  std::vector<int> members_;  // world ranks, in group-rank order
  int rank_;
  std::string name_;
  int64_t seq_ = 0;
  int depth_ = 0;  // > 0 while inside a collective
  int64_t sent_bytes_ = 0;
  // When this rank sent each (distance, tag) message not yet matched by a mirror's.
  std::map<std::pair<int, int>, std::deque<double>> mirror_sends_;
  std::map<std::pair<int, int64_t>, double> step_times_;
  std::map<Call, Replay> replays_;
};

}  // namespace

std::unique_ptr<Comm> make_symmetric_comm(RankContext& ctx, const HardwareProfile& profile,
                                          std::vector<int> members, int my_index,
                                          std::string name) {
  return std::make_unique<SymmetricComm>(ctx, profile, std::move(members), my_index,
                                         std::move(name));
}

}  // namespace mgpu::comm

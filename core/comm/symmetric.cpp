// The symmetric group (symmetric.h). Every collective runs the shared algorithm
// (AlgorithmicComm) on this comm; only point-to-point differs: instead of meeting a partner in a
// mailbox, a message is priced as its mirror image. A send to the member d places ahead occupies
// the comm lane for this rank's own link, as in the local backend; the matching receive, from the
// member d places behind, ends when that member's mirror send (issued when this rank issued its
// own) has crossed the slowest link of the group at distance d.
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
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithmic_comm.h"
#include "core/comm/cost_model.h"

namespace mgpu::comm {

namespace {

// Everything a collective's cost on this rank depends on, besides its start time.
struct Call {
  std::string kind;
  int64_t in_elements = 0, out_elements = 0;
  DType dtype = DType::f32;
  int op = -1, root = -1;
  std::vector<int64_t> send_counts, recv_counts;  // all_to_all_v's
  // Spelled out (libc++ 14 has no <=> for std::string): the members in order, lexicographic.
  auto tied() const {
    return std::tie(kind, in_elements, out_elements, dtype, op, root, send_counts, recv_counts);
  }
  bool operator<(const Call& o) const { return tied() < o.tied(); }
};

Call replay_key(const CollectiveCall& c) {
  return {c.kind,
          c.in_elements,
          c.out_elements,
          c.shown ? c.shown->dtype() : DType::f32,
          c.op ? static_cast<int>(*c.op) : -1,
          c.root,
          {c.send_counts.begin(), c.send_counts.end()},
          {c.recv_counts.begin(), c.recv_counts.end()}};
}

// A collective's first run, to replay for the same call.
struct Replay {
  double duration = 0;
  double wait = 0;  // waiting for a partner inside it (trace::Event::wait)
  int64_t sent_bytes = 0;
  int64_t transient_bytes = 0;  // the most it held at once, beyond what was there
  MemCategory transient_category = MemCategory::comm_buffers;
};

// The point-to-point layer against mirrors; the collectives are AlgorithmicComm's, replayed.
class SymmetricComm final : public AlgorithmicComm {
 public:
  SymmetricComm(RankContext& ctx, const HardwareProfile& profile, std::vector<int> members,
                int my_index, std::string name)
      : AlgorithmicComm(ctx, std::move(name), std::move(members), my_index, ctx.all_reduce),
        profile_(profile) {
    if (!ctx.clock.modeled())
      throw std::invalid_argument(fmt::format(
          "symmetric group {}: its members are not run, so only the modeled clock can time it",
          this->name()));
    if (my_index < 0 || my_index >= size())
      throw std::invalid_argument(fmt::format("symmetric group {}: index {} of {} members",
                                              this->name(), my_index, size()));
  }

  std::string backend() const override { return "symmetric"; }

  // ---- point-to-point (inside collectives, and for symmetric patterns such as a K/V ring)
  void send(const Tensor& t, int dst, int tag) override { compute_waits_for(post(t, dst, tag)); }

  void recv(Tensor& t, int src, int tag) override {
    compute_waits_for(receive(t, src, tag, ctx().clock.comm_issue_time()));
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
    return on_wait([this, target = t, src, tag, posted = ctx().clock.comm_issue_time()]() mutable {
      compute_waits_for(receive(target, src, tag, posted));
    });
  }

  std::unique_ptr<Comm> split(int, int, const std::string&) override {
    throw std::logic_error(fmt::format(
        "symmetric group {}: split() needs the other members, which are not run (the mesh "
        "builds every group of a representative world)",
        name()));
  }

 private:
  int distance_to(int peer) const { return (peer - rank() + size()) % size(); }

  void check_payload(const Tensor& t, const char* op) const override {
    if (t.has_data())
      throw CommError(fmt::format(
          "{} on symmetric group {}: the tensor holds values, but the group's other members are "
          "not run, so none could arrive; simulate on the phantom device",
          op, name()));
  }

  // all_to_all_v: the member d places behind is this rank's mirror, so it sends this rank what
  // this rank sends the member d places ahead. Counts that break that mirror cannot be priced.
  void agree_on_counts(int64_t /*seq*/, std::span<const int64_t> send_counts,
                       std::span<const int64_t> recv_counts) override {
    const int n = size(), r = rank();
    for (int d = 0; d < n; ++d) {
      const int ahead = (r + d) % n, behind = (r - d + n) % n;
      if (recv_counts[behind] != send_counts[ahead])
        throw CommError(fmt::format(
            "all_to_all_v on symmetric group {}: recv_counts[{}] is {} but send_counts[{}] is "
            "{}; its mirrored members send what this rank sends, so each recv count must equal "
            "the send count as far ahead as its source is behind (e.g. all counts equal)",
            name(), behind, recv_counts[behind], ahead, send_counts[ahead]));
    }
  }

  // A broadcast is not symmetric (the root sends, the others receive and forward): this rank's
  // sends are counted as the tree makes them, and the collective lasts until the last member of
  // the tree holds the data.
  void broadcast_steps(Tensor& t, int root) override {
    const int v = (rank() - root + size()) % size();
    for (int mask = 1; mask < size(); mask <<= 1)
      if (v < mask && v + mask < size()) count_sent(t.bytes());
    const double start = ctx().clock.comm_issue_time();
    ctx().clock.wait_comm_until(
        start + tree_broadcast_time(members(), root, static_cast<double>(t.bytes()), profile_));
  }

  // Every member sends `bytes` to the member `distance` ahead at once; the slowest link paces the
  // step. (Memoised: a ring repeats the same few chunk sizes thousands of times.)
  double step_time(int distance, int64_t bytes) {
    auto [it, fresh] = step_times_.try_emplace({distance, bytes}, 0.0);
    if (fresh) it->second = slowest_step(members(), distance, static_cast<double>(bytes), profile_);
    return it->second;
  }

  // This rank's send occupies the comm lane for its own link, as in the local backend; the
  // mirror image of this message is on its way to this rank from the member `distance` behind.
  double post(const Tensor& t, int dst, int tag) {
    check_peer(dst, "send to");
    check_payload(t, "send");
    const int distance = distance_to(dst);
    RankClock& clock = ctx().clock;
    const double sent = clock.comm_issue_time();
    const double end = sent + profile_.transfer_time(my_world_rank(), world_rank(dst),
                                                     static_cast<double>(t.bytes()));
    clock.wait_comm_until(end);
    mirror_sends_[{distance, tag}].push_back(sent);
    count_sent(t.bytes());
    record_p2p("send", dst, t.bytes(), t.bytes(), sent, end);
    return end;
  }

  // The message from the member `distance` behind was sent when this rank sent its own message
  // `distance` ahead with the same tag. A receive with no such send (a pattern that is not
  // symmetric) takes the message as sent when the receive was posted.
  double receive(Tensor& t, int src, int tag, double posted) {
    check_peer(src, "recv from");
    check_payload(t, "recv");
    const int distance = distance_to(src) == 0 ? 0 : size() - distance_to(src);
    double sent = posted;
    if (auto it = mirror_sends_.find({distance, tag});
        it != mirror_sends_.end() && !it->second.empty()) {
      sent = it->second.front();
      it->second.pop_front();
    }
    return receive_ends(src, t.bytes(), posted, sent, step_time(distance, t.bytes()),
                        /*sent_on_my_clock=*/true);
  }

  // Runs the steps (the algorithm's sends and receives, on the comm lane) or replays their first
  // run for the same call.
  void run_steps(const CollectiveCall& collective, double start, StepsRef steps) override {
    const Call call = replay_key(collective);
    if (auto it = replays_.find(call); it != replays_.end()) return replay(it->second, start);
    const int64_t sent_before = sent_bytes();
    const std::optional<Replay> recorded = record(steps);
    if (recorded) {
      Replay r = *recorded;
      r.duration = std::max(start, ctx().clock.comm_now()) - start;
      r.sent_bytes = sent_bytes() - sent_before;
      r.wait = collective_wait();
      replays_.emplace(call, r);
    }
  }

  // Runs `steps` while watching the allocator: the most it held beyond what was there before, in
  // one category. Empty when the run cannot be replayed (buffers of several categories at once,
  // or a message left unmatched).
  std::optional<Replay> record(StepsRef steps) {
    RankContext& ctx = this->ctx();
    const MemoryStats before = ctx.allocator.stats();
    CategoryBytes most{};
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
    steps();
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
    ctx().clock.wait_comm_until(start + r.duration);
    count_sent(r.sent_bytes);
    count_wait(r.wait);
    if (r.transient_bytes > 0)  // allocated and freed at once: the peaks move as in the run
      ctx().allocator.allocate(r.transient_bytes, r.transient_category);
  }

  size_t pending_mirror_sends() const {
    size_t n = 0;
    for (const auto& [key, times] : mirror_sends_) n += times.size();
    return n;
  }

  HardwareProfile profile_;
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

// The shared state of a thread world: the mailboxes every rank's LocalComm sends into, and the
// registry that turns a student's communication mistakes into errors instead of hangs:
//  - each blocked wait registers what it waits for ("rank 2 waits for recv from rank 1 (tag 7)");
//    when every unfinished rank waits for something that is not there, nobody can ever make
//    progress (only ranks send), so it is a certain deadlock and is reported at once;
//  - a wait longer than the timeout reports the same table;
//  - each group checks that all members call the same collective with the same arguments.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/all_reduce_fn.h"
#include "core/runtime/allocator.h"
#include "core/runtime/context.h"

namespace mgpu::comm::local {

// Point-to-point costs one copy. A send offers a pointer to its own buffer and the receiver
// copies straight from it into its own. When ranks share cores (more ranks than cores), a
// receive that is already posted is instead filled by the sender at once, since the sender is the
// thread that is running now. Only a receiver that is late when the sender must leave (a
// blocking send, or isend's wait) makes the sender copy into a spare buffer of the mailbox, which
// is reused: no allocation per message. A receive that accumulates (recv_reduce) is delivered the
// same way, by adding instead of copying the sender's f32 values into the receiver's buffer.
//
// One exception to "the receiver copies", with a core each: when the receive's buffer is memory
// its sender has just read from (the ring all-gather's step right after the reduce-scatter: the
// sender read exactly those lines to add them), the sender copies instead. Its cache already
// holds those lines, so it overwrites them without fetching anything; the receiver pulling the
// data instead must fetch it and take back lines the sender holds, which on the 2-core host costs
// 3-5x more (docs/lessons/01-collectives.md). Every other copy stays with the receiver: pushing
// into lines the receiver owns is the slow direction.
struct Outgoing {
  const void* data = nullptr;  // null for phantom tensors (shapes only)
  int64_t bytes = 0;
  DeviceKind kind = DeviceKind::cpu;
  double sent = 0;  // the sender's modeled issue time
};
struct Incoming {
  void* data = nullptr;
  int64_t bytes = 0;
  DeviceKind kind = DeviceKind::cpu;
  bool accumulate = false;  // data[i] += message[i] (host f32) instead of a copy
};
struct Arrived {
  int64_t bytes = 0;  // what the sender sent (may differ from the receive buffer: an error)
  double sent = 0;
};

// Where a message waits: group, world ranks of sender and receiver, tag, and whether it belongs
// to a collective (collectives' internal messages never match user send/recv).
struct MailboxKey {
  std::string group;
  int src = 0, dst = 0, tag = 0;
  bool internal = false;
  // Spelled out (libc++ 14 has no <=> for std::string): the members in order, lexicographic.
  auto tied() const { return std::tie(group, src, dst, tag, internal); }
  bool operator<(const MailboxKey& o) const { return tied() < o.tied(); }
};

class LocalWorld {
 public:
  // ranks_share_cores: more rank threads than cores (see ranks_share_cores() below); it only
  // decides who copies a message (the results, clock and trace are the same either way).
  LocalWorld(int size, double timeout_seconds, bool ranks_share_cores);
  int size() const { return size_; }

  // Lifecycle, called by World: before each run, when a rank's function returns, when it throws.
  void begin_run();
  void rank_finished(int world_rank);
  void rank_failed(int world_rank);

  // Point-to-point. Messages and receives are numbered in mailbox order: message k goes to the
  // k-th receive posted, so irecvs posted in order receive in order whatever order they are
  // waited in. post() offers the sender's buffer (or copies into an already posted receive) and
  // returns an Offer; release() must follow before the sender's buffer changes: it returns at
  // once if the data was delivered, else after a short spin copies it into a spare buffer.
  // reserve() posts a receive buffer; take() waits for the data to be in it. receive() is both
  // at once, for a blocking receive.
  struct Offer {
    int64_t number = 0;      // the message number
    bool delivered = false;  // post() already put the data into the posted receive
    bool spin = false;       // release() gives a late receiver a spin before buffering
    uint64_t wakeups = 0;    // the sender's wake-up count at post(): release() waits for it to
                             // change (the receiver wakes the sender when it has the data)
  };
  Offer post(const MailboxKey& key, const Outgoing& message);
  void release(const MailboxKey& key, const Offer& offer);
  int64_t reserve(const MailboxKey& key, const Incoming& target);
  Arrived take(const MailboxKey& key, int64_t ticket, int waiter,
               const std::function<std::string()>& describe);
  Arrived receive(const MailboxKey& key, const Incoming& target, int waiter,
                  const std::function<std::string()>& describe);

  // Collective checks: the first member to reach collective #seq registers its call; later
  // members compare without blocking. A mismatch raises CommError on every member.
  void check_collective(const std::string& group_key, const std::string& group_name, int64_t seq,
                        int members, int world_rank, const std::string& call);

  // Every member of `members` (world ranks) contributes a value and gets all of them, in member
  // order: (color, key) for split, the counts for all_to_all_v's check.
  std::vector<std::vector<int64_t>> gather(const std::string& group_key, int64_t id,
                                           const std::vector<int>& members, int my_index,
                                           std::vector<int64_t> value, const std::string& what);
  std::vector<std::pair<int, int>> exchange(const std::string& group_key, int64_t id,
                                            const std::vector<int>& members, int my_index,
                                            std::pair<int, int> value, const std::string& what);

 private:
  // One message's meeting point. `copying` means one side is copying outside the lock; the
  // other side waits for it to finish before its buffer may go away.
  enum class Stage { waiting, offered, copying, buffered, delivered };
  struct Slot {
    Stage stage = Stage::waiting;
    Outgoing message;  // valid once the sender posted
    bool sender_posted = false, sender_done = false;
    Incoming target;  // valid once the receiver posted
    bool receiver_posted = false, receiver_done = false;
    bool push = false;  // the sender copies: it recently read the target's memory (see above)
    std::vector<std::byte> spare;  // holds the data when the receiver was late
  };
  using Slots = std::map<int64_t, Slot>;  // by message number
  struct Mailbox {
    Slots slots;
    int64_t arrived = 0;
    int64_t reserved = 0;
    std::vector<Slots::node_type> spare_slots;          // finished slots, reused
    std::vector<std::vector<std::byte>> spare_buffers;  // reused for late receivers
  };
  enum class State { running, blocked, finished };
  struct RankWait {
    State state = State::running;
    std::string what;             // "waits for recv from rank 1 (tag 7) in group world"
    std::function<bool()> ready;  // evaluated under the lock
  };
  struct CollectiveCalls {
    std::vector<std::pair<int, std::string>>
        calls;  // (world rank, "all_reduce(count=4, f32, sum)")
  };
  struct Rendezvous {
    std::vector<std::vector<int64_t>> values;
    int arrived = 0, departed = 0;
  };

  std::unique_lock<std::mutex> lock_world() const;
  void relock(std::unique_lock<std::mutex>& lock) const;
  void wait_locked(std::unique_lock<std::mutex>& lock, int waiter,
                   const std::function<std::string()>& describe,
                   const std::function<bool()>& ready);
  // Waits, uninterruptibly, while the other side of `slot` copies (a copy always finishes).
  void wait_copy_locked(std::unique_lock<std::mutex>& lock, int waiter, const Slot& slot);
  // Spins briefly for a wake-up of `rank` after the count `seen`; true if one came. The second
  // form releases the lock while it spins.
  bool spin_until_woken(int rank, uint64_t seen) const;
  bool spin_for_wakeup(std::unique_lock<std::mutex>& lock, int rank);
  // reserve() and receive() with the lock held: posts the receive buffer, returns its ticket.
  int64_t reserve_locked(Mailbox& box, const Incoming& target, int src, int dst);
  // Pushes: whether `sender` should copy `message` into `target` itself; the copies `rank` owes
  // as a sender (receivers wait for them while the rank is serving, else copy themselves); a
  // receiver's wait for its sender's push.
  bool sender_pushes(int sender, const Incoming& target, const Outgoing& message) const;
  void push_owed_locked(std::unique_lock<std::mutex>& lock, int rank);
  void wait_for_push_locked(std::unique_lock<std::mutex>& lock, int src, int waiter,
                            const Slot& slot);
  void remember_read(int rank, const Outgoing& message);
  // The sender copies its message into the posted receive (ranks sharing cores, or a push),
  // outside the lock, and wakes the receiver `dst` to find it delivered.
  void sender_delivers_locked(std::unique_lock<std::mutex>& lock, Slot& slot, int dst);
  // take() and receive() once the receive is posted and the lock held.
  Arrived take_locked(std::unique_lock<std::mutex>& lock, Mailbox& box, int64_t ticket, int src,
                      int waiter, const std::function<std::string()>& describe);
  void wake(int rank);
  Slot& slot_locked(Mailbox& box, int64_t number);
  void finish_slot_locked(Mailbox& box, int64_t number);
  void throw_if_stopped_locked() const;
  void detect_deadlock_locked();
  void fail_locked(const std::string& message);
  std::string table_locked() const;

  int size_;
  double timeout_;
  bool own_cores_;  // every rank can have a core to itself: receivers copy in parallel
  // The lock and each rank's wake-up counter sit on cache lines of their own: a rank spinning on
  // its counter is then disturbed only by its own wake-ups, not by every lock or other wake-up.
  alignas(64) mutable std::mutex mutex_;
  alignas(64)
      std::vector<std::condition_variable> wakeups_;  // one per rank: only the receiver is woken
  // Bumped with every wake-up of a rank, so a waiter can spin on it without the lock.
  struct alignas(64) WakeupCount {
    std::atomic<uint64_t> value{0};
  };
  std::unique_ptr<WakeupCount[]> wakeup_counts_;
  std::vector<RankWait> ranks_;
  // What each rank last read as a receiver (pointer, bytes): the memory whose lines its cache
  // holds. A few entries cover a collective's steps; a stale one only costs speed.
  struct RecentReads {
    std::array<std::pair<const std::byte*, int64_t>, 4> regions{};
    int next = 0;
  };
  std::vector<RecentReads> recent_reads_;
  // Copies each rank owes as a sender (mailbox, message number), and whether the rank is in a
  // wait that makes them (a receiver waits for a push only from a serving sender).
  struct OwedPush {
    Mailbox* box;
    int64_t number;
    int dst;
  };
  std::vector<std::vector<OwedPush>> owed_pushes_;
  std::unique_ptr<std::atomic<bool>[]> serving_;
  int64_t push_limit_;  // largest push: half a core's L2, so that what the sender read is cached
  struct Serving {      // marks `rank` serving for a scope
    LocalWorld& world;
    int rank;
    Serving(LocalWorld& w, int r) : world(w), rank(r) {
      world.serving_[rank].store(true, std::memory_order_release);
    }
    ~Serving() { world.serving_[rank].store(false, std::memory_order_release); }
  };
  std::map<MailboxKey, Mailbox> mailboxes_;
  std::map<std::pair<std::string, int64_t>, CollectiveCalls> collectives_;
  std::map<std::pair<std::string, int64_t>, Rendezvous> rendezvous_;
  std::optional<std::string> comm_error_;  // set once: deadlock, timeout or mismatch
  int failed_rank_ = -1;                   // a rank whose function threw
};

// True when `ranks` threads are more than the machine's cores.
bool ranks_share_cores(int ranks);

// One LocalComm per rank over the world group; ranks[r] is world rank r's context.
// Every comm (and group split from it) runs `all_reduce` as its all-reduce.
std::vector<std::unique_ptr<Comm>> make_local_world_comms(std::shared_ptr<LocalWorld> world,
                                                          const std::vector<RankContext*>& ranks,
                                                          const AllReduceFn& all_reduce);

}  // namespace mgpu::comm::local

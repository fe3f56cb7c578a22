// The shared state of a thread world: the mailboxes every rank's LocalComm sends into, and the
// registry that turns a student's communication mistakes into errors instead of hangs:
//  - each blocked wait registers what it waits for ("rank 2 waits for recv from rank 1 (tag 7)");
//    when every unfinished rank waits for something that is not there, nobody can ever make
//    progress (only ranks send), so it is a certain deadlock and is reported at once;
//  - a wait longer than the timeout reports the same table;
//  - each group checks that all members call the same collective with the same arguments.
#pragma once
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
#include "core/runtime/context.h"

namespace mgpu::comm::local {

// A message in flight: a copy of the sent bytes plus the sender's modeled issue time.
struct Message {
  std::vector<std::byte> payload;  // empty for phantom tensors (shapes only)
  int64_t bytes = 0;
  double sent = 0;
};

// Where a message waits: group, world ranks of sender and receiver, tag, and whether it belongs
// to a collective (collectives' internal messages never match user send/recv).
struct MailboxKey {
  std::string group;
  int src = 0, dst = 0, tag = 0;
  bool internal = false;
  auto operator<=>(const MailboxKey&) const = default;
};

class LocalWorld {
 public:
  LocalWorld(int size, double timeout_seconds);
  int size() const { return size_; }

  // Lifecycle, called by World: before each run, when a rank's function returns, when it throws.
  void begin_run();
  void rank_finished(int world_rank);
  void rank_failed(int world_rank);

  // Point-to-point. A receive first reserves its place in the mailbox's order (a ticket), so
  // irecvs posted in order receive in order whatever order they are waited in.
  void post(const MailboxKey& key, Message message);
  int64_t reserve(const MailboxKey& key);
  Message take(const MailboxKey& key, int64_t ticket, int waiter, const std::string& what);

  // Collective checks: the first member to reach collective #seq registers its call; later
  // members compare without blocking. A mismatch raises CommError on every member.
  void check_collective(const std::string& group_key, const std::string& group_name, int64_t seq,
                        int members, int world_rank, const std::string& call);

  // Every member of `members` (world ranks) contributes a value and gets all of them (split).
  std::vector<std::pair<int, int>> exchange(const std::string& group_key, int64_t id,
                                            const std::vector<int>& members, int my_index,
                                            std::pair<int, int> value, const std::string& what);

 private:
  struct Mailbox {
    std::map<int64_t, Message> messages;  // by arrival number
    int64_t arrived = 0;
    int64_t reserved = 0;
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
    std::vector<std::pair<int, int>> values;
    int arrived = 0, departed = 0;
  };

  void wait_locked(std::unique_lock<std::mutex>& lock, int waiter, const std::string& what,
                   const std::function<bool()>& ready);
  void throw_if_stopped_locked() const;
  void detect_deadlock_locked();
  void fail_locked(const std::string& message);
  std::string table_locked() const;

  int size_;
  double timeout_;
  mutable std::mutex mutex_;
  std::vector<std::condition_variable> wakeups_;  // one per rank: only the receiver is woken
  std::vector<RankWait> ranks_;
  std::map<MailboxKey, Mailbox> mailboxes_;
  std::map<std::pair<std::string, int64_t>, CollectiveCalls> collectives_;
  std::map<std::pair<std::string, int64_t>, Rendezvous> rendezvous_;
  std::optional<std::string> comm_error_;  // set once: deadlock, timeout or mismatch
  int failed_rank_ = -1;                   // a rank whose function threw
};

// One LocalComm per rank over the world group; ranks[r] is world rank r's context.
std::vector<std::unique_ptr<Comm>> make_local_world_comms(std::shared_ptr<LocalWorld> world,
                                                          const std::vector<RankContext*>& ranks);

}  // namespace mgpu::comm::local

#include "core/comm/local/local_world.h"

#include <chrono>

#include <fmt/format.h>

namespace mgpu::comm::local {

LocalWorld::LocalWorld(int size, double timeout_seconds)
    : size_(size), timeout_(timeout_seconds), wakeups_(size), ranks_(size) {}

void LocalWorld::begin_run() {
  std::lock_guard lock(mutex_);
  for (auto& r : ranks_) r = RankWait{};
  mailboxes_.clear();
  collectives_.clear();
  rendezvous_.clear();
  comm_error_.reset();
  failed_rank_ = -1;
}

void LocalWorld::rank_finished(int world_rank) {
  std::lock_guard lock(mutex_);
  ranks_[world_rank] = RankWait{State::finished, "finished, will never send", {}};
  // A rank that leaves early may be the one the others were waiting for.
  if (!comm_error_ && failed_rank_ < 0) detect_deadlock_locked();
}

void LocalWorld::rank_failed(int world_rank) {
  std::lock_guard lock(mutex_);
  ranks_[world_rank] = RankWait{State::finished, "failed", {}};
  if (failed_rank_ < 0) failed_rank_ = world_rank;
  for (auto& cv : wakeups_) cv.notify_all();
}

void LocalWorld::post(const MailboxKey& key, Message message) {
  std::lock_guard lock(mutex_);
  throw_if_stopped_locked();
  Mailbox& box = mailboxes_[key];
  box.messages.emplace(box.arrived++, std::move(message));
  wakeups_[key.dst].notify_all();
}

int64_t LocalWorld::reserve(const MailboxKey& key) {
  std::lock_guard lock(mutex_);
  throw_if_stopped_locked();
  return mailboxes_[key].reserved++;
}

Message LocalWorld::take(const MailboxKey& key, int64_t ticket, int waiter,
                         const std::string& what) {
  std::unique_lock lock(mutex_);
  Mailbox& box = mailboxes_[key];  // std::map: the reference stays valid while others insert
  wait_locked(lock, waiter, what, [&box, ticket] { return box.messages.count(ticket) > 0; });
  auto it = box.messages.find(ticket);
  Message message = std::move(it->second);
  box.messages.erase(it);
  return message;
}

void LocalWorld::check_collective(const std::string& group_key, const std::string& group_name,
                                  int64_t seq, int members, int world_rank,
                                  const std::string& call) {
  std::lock_guard lock(mutex_);
  throw_if_stopped_locked();
  auto key = std::make_pair(group_key, seq);
  CollectiveCalls& entry = collectives_[key];
  entry.calls.emplace_back(world_rank, call);
  if (entry.calls.front().second != call) {
    std::string message =
        fmt::format("collective #{} in group {} does not match:", seq, group_name);
    auto calls = entry.calls;
    std::sort(calls.begin(), calls.end());
    for (size_t i = 0; i < calls.size(); ++i)
      message += fmt::format("{} rank {} called {}", i ? ";" : "", calls[i].first, calls[i].second);
    fail_locked(message);
    throw CommError(message);
  }
  if (static_cast<int>(entry.calls.size()) == members) collectives_.erase(key);
}

std::vector<std::pair<int, int>> LocalWorld::exchange(const std::string& group_key, int64_t id,
                                                      const std::vector<int>& members, int my_index,
                                                      std::pair<int, int> value,
                                                      const std::string& what) {
  std::unique_lock lock(mutex_);
  throw_if_stopped_locked();
  auto key = std::make_pair(group_key, id);
  Rendezvous& rv = rendezvous_[key];
  rv.values.resize(members.size());
  rv.values[my_index] = value;
  ++rv.arrived;
  for (int m : members) wakeups_[m].notify_all();
  int n = static_cast<int>(members.size());
  wait_locked(lock, members[my_index], what, [&rv, n] { return rv.arrived == n; });
  auto values = rv.values;
  if (++rv.departed == n) rendezvous_.erase(key);
  return values;
}

void LocalWorld::wait_locked(std::unique_lock<std::mutex>& lock, int waiter,
                             const std::string& what, const std::function<bool()>& ready) {
  throw_if_stopped_locked();
  if (ready()) return;
  ranks_[waiter] = RankWait{State::blocked, what, ready};
  struct Unblock {  // back to running however we leave (message, error or abort)
    RankWait& w;
    ~Unblock() {
      if (w.state == State::blocked) w = RankWait{};
    }
  } unblock{ranks_[waiter]};
  detect_deadlock_locked();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
  while (true) {
    throw_if_stopped_locked();
    if (ready()) return;
    if (wakeups_[waiter].wait_until(lock, deadline) == std::cv_status::timeout) {
      throw_if_stopped_locked();
      if (ready()) return;
      fail_locked(
          fmt::format("timeout: rank {} waited more than {} s (comm_timeout); who waits "
                      "for whom:\n{}",
                      waiter, timeout_, table_locked()));
      throw_if_stopped_locked();
    }
  }
}

void LocalWorld::throw_if_stopped_locked() const {
  if (comm_error_) throw CommError(*comm_error_);
  if (failed_rank_ >= 0) throw Aborted(fmt::format("aborted because rank {} failed", failed_rank_));
}

// Only ranks send, so if every unfinished rank waits for something that has not arrived, no
// message can ever arrive: a certain deadlock, whatever the clock or the timeout.
void LocalWorld::detect_deadlock_locked() {
  bool anyone_waiting = false;
  for (const RankWait& r : ranks_) {
    if (r.state == State::finished) continue;
    if (r.state == State::running || r.ready()) return;
    anyone_waiting = true;
  }
  if (anyone_waiting)
    fail_locked("deadlock: every rank is waiting and none can proceed; who waits for whom:\n" +
                table_locked());
}

void LocalWorld::fail_locked(const std::string& message) {
  if (!comm_error_) comm_error_ = message;
  for (auto& cv : wakeups_) cv.notify_all();
}

std::string LocalWorld::table_locked() const {
  std::string table;
  for (int r = 0; r < size_; ++r)
    table += fmt::format("  rank {}: {}\n", r,
                         ranks_[r].state == State::running ? "running" : ranks_[r].what);
  return table;
}

}  // namespace mgpu::comm::local

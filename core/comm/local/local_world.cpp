// How ranks wait in a thread world and how a stuck wait becomes an error: the lock and wake-ups,
// the run's lifecycle, and the "who waits for whom" registry (deadlock, timeout).
#include "core/comm/local/local_world.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "core/comm/local/local_world_internal.h"

namespace mgpu::comm::local {

using detail::cpu_relax;
using detail::kSpin;

namespace {

// Before the yields, when every rank has a core: this many pause-and-look turns.
constexpr int kPauseSpins = 64;

// The L2 cache's size where the C library says it (glibc's sysconf name), else 0.
int64_t l2_cache_bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  return sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
  return 0;
#endif
}

}  // namespace

bool ranks_share_cores(int ranks) {
  return ranks > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

LocalWorld::LocalWorld(int size, double timeout_seconds, bool ranks_share_cores)
    : size_(size),
      timeout_(timeout_seconds),
      own_cores_(!ranks_share_cores),
      wakeups_(size),
      wakeup_counts_(std::make_unique<WakeupCount[]>(size)),
      ranks_(size),
      recent_reads_(size),
      owed_pushes_(size),
      serving_(std::make_unique<std::atomic<bool>[]>(size)),
      push_limit_(std::max<int64_t>(l2_cache_bytes(), 512 * 1024) / 2) {}

void LocalWorld::wake(int rank) {
  wakeup_counts_[rank].value.fetch_add(1, std::memory_order_release);
  wakeups_[rank].notify_all();
}

// The lock is held for well under a microsecond at a time (copies happen outside it), so a rank
// that finds it taken spins for it rather than sleeping in the kernel: a futex sleep and wake-up
// costs more than the wait, and on a virtual machine much more. A holder that lost its core
// gets it back through the yields; after those, block as usual.
void LocalWorld::relock(std::unique_lock<std::mutex>& lock) const {
  for (int attempt = 0; attempt < 256; ++attempt) {
    if (lock.try_lock()) return;
    if (attempt < 64)
      cpu_relax();
    else
      std::this_thread::yield();
  }
  lock.lock();
}

std::unique_lock<std::mutex> LocalWorld::lock_world() const {
  std::unique_lock lock(mutex_, std::defer_lock);
  relock(lock);
  return lock;
}

bool LocalWorld::spin_until_woken(int rank, uint64_t seen) const {
  auto woken = [&] { return wakeup_counts_[rank].value.load(std::memory_order_acquire) != seen; };
  // With a core each the partner is running: most wake-ups come within a microsecond or two,
  // sooner than a yield returns, so watch the counter first (about 1.7 us on the 2-core host).
  if (own_cores_)
    for (int i = 0; i < kPauseSpins; ++i) {
      if (woken()) return true;
      cpu_relax();
    }
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!woken())
    if (std::chrono::steady_clock::now() >= until)
      return false;
    else
      std::this_thread::yield();
  return true;
}

bool LocalWorld::spin_for_wakeup(std::unique_lock<std::mutex>& lock, int rank) {
  const uint64_t seen = wakeup_counts_[rank].value.load(std::memory_order_acquire);
  lock.unlock();
  const bool woken = spin_until_woken(rank, seen);
  relock(lock);
  return woken;
}

void LocalWorld::begin_run() {
  auto lock = lock_world();
  for (auto& r : ranks_) r = RankWait{};
  for (auto& r : recent_reads_) r = RecentReads{};
  for (auto& owed : owed_pushes_) owed.clear();
  mailboxes_.clear();
  collectives_.clear();
  rendezvous_.clear();
  comm_error_.reset();
  failed_rank_ = -1;
}

void LocalWorld::rank_finished(int world_rank) {
  auto lock = lock_world();
  ranks_[world_rank] = RankWait{State::finished, "finished, will never send", {}};
  // A rank that leaves early may be the one the others were waiting for.
  if (!comm_error_ && failed_rank_ < 0) detect_deadlock_locked();
}

void LocalWorld::rank_failed(int world_rank) {
  auto lock = lock_world();
  ranks_[world_rank] = RankWait{State::finished, "failed", {}};
  if (failed_rank_ < 0) failed_rank_ = world_rank;
  for (int r = 0; r < size_; ++r) wake(r);
}

void LocalWorld::wait_locked(std::unique_lock<std::mutex>& lock, int waiter,
                             const std::function<std::string()>& describe,
                             const std::function<bool()>& ready) {
  throw_if_stopped_locked();
  if (ready()) return;
  // Most partners are microseconds away: spin a little before registering as blocked, making
  // the pushes we owe meanwhile (their receivers wait for them while we serve).
  {
    Serving serving(*this, waiter);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    do {
      push_owed_locked(lock, waiter);
      if (ready()) return;
      spin_for_wakeup(lock, waiter);
      throw_if_stopped_locked();
      if (ready()) return;
    } while (std::chrono::steady_clock::now() < until);
    push_owed_locked(lock, waiter);
  }
  ranks_[waiter] = RankWait{State::blocked, describe(), ready};
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
  for (int r = 0; r < size_; ++r) wake(r);
}

std::string LocalWorld::table_locked() const {
  std::string table;
  for (int r = 0; r < size_; ++r)
    table += fmt::format("  rank {}: {}\n", r,
                         ranks_[r].state == State::running ? "running" : ranks_[r].what);
  return table;
}

}  // namespace mgpu::comm::local

#include "core/comm/local/local_world.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::local {

namespace {

// One copy between two buffers; CUDA memory (ranks sharing a GPU) goes through the CUDA hooks.
void copy_bytes(void* dst, DeviceKind dst_kind, const void* src, DeviceKind src_kind,
                int64_t bytes) {
  if (bytes == 0 || !dst || !src) return;  // phantom tensors carry no values
  if (dst_kind == DeviceKind::cuda || src_kind == DeviceKind::cuda)
    device_memory_hooks(DeviceKind::cuda).copy(dst, src, bytes);
  else
    std::memcpy(dst, src, static_cast<size_t>(bytes));
}

// Hands a message to its receive: a copy, or for recv_reduce an add (host f32 only; LocalComm
// sends other receives through Comm's recv + add).
void deliver(const Incoming& target, const Outgoing& message) {
  if (!target.accumulate) {
    copy_bytes(target.data, target.kind, message.data, message.kind, message.bytes);
  } else if (target.data && message.data) {
    algorithms::add_floats(static_cast<float*>(target.data),
                           static_cast<const float*>(message.data),
                           message.bytes / static_cast<int64_t>(sizeof(float)));
  }
}

// A hint to the core that this thread is spinning (lets a sibling hyper-thread run).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a waiter spins (yielding) before it sleeps on its condition variable: long enough to
// catch a partner that is a few microseconds behind, short enough not to starve it on few cores.
constexpr auto kSpin = std::chrono::microseconds(30);
// Before the yields, when every rank has a core: this many pause-and-look turns.
constexpr int kPauseSpins = 64;
// How long a receiver waits for a push from a sender that is not yet in a wait: in a collective's
// step both partners arrive within a microsecond or two of each other.
constexpr auto kPushGrace = std::chrono::microseconds(4);

// When ranks share cores, a late receiver of a message this small costs the sender less as a
// copy into a spare buffer than as a spin: a 64 KiB copy is a few microseconds, a spin up to
// kSpin and often a lost core. With a core each, the receiver is running and the spin is cheap.
constexpr int64_t kSpareRatherThanSpin = 256 * 1024;

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
      push_limit_(std::max<int64_t>(sysconf(_SC_LEVEL2_CACHE_SIZE), 512 * 1024) / 2) {}

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

LocalWorld::Slot& LocalWorld::slot_locked(Mailbox& box, int64_t number) {
  auto it = box.slots.find(number);
  if (it != box.slots.end()) return it->second;
  if (box.spare_slots.empty()) return box.slots[number];
  Slots::node_type node = std::move(box.spare_slots.back());
  box.spare_slots.pop_back();
  node.key() = number;
  node.mapped() = Slot{};
  return box.slots.insert(std::move(node)).position->second;
}

void LocalWorld::finish_slot_locked(Mailbox& box, int64_t number) {
  auto it = box.slots.find(number);
  if (!it->second.sender_done || !it->second.receiver_done) return;
  if (it->second.spare.capacity() > 0) box.spare_buffers.push_back(std::move(it->second.spare));
  box.spare_slots.push_back(box.slots.extract(it));
}

LocalWorld::Offer LocalWorld::post(const MailboxKey& key, const Outgoing& message) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  Mailbox& box = mailboxes_[key];  // std::map: references stay valid while others insert
  Offer offer;
  offer.number = box.arrived++;
  offer.spin = own_cores_ || message.bytes > kSpareRatherThanSpin;
  offer.wakeups = wakeup_counts_[key.src].value.load(std::memory_order_relaxed);
  Slot& slot = slot_locked(box, offer.number);
  slot.message = message;
  slot.sender_posted = true;
  if (slot.receiver_posted && slot.target.bytes == message.bytes &&
      (!own_cores_ || sender_pushes(key.src, slot.target, message))) {
    // The receive is already posted and either ranks share cores (copy now, rather than wait
    // for the receiver to get a core) or we just read its memory (a push, see local_world.h).
    // With a core each, every receiver otherwise copies its own messages, in parallel.
    sender_delivers_locked(lock, slot, key.dst);
    offer.delivered = true;
  } else {
    slot.stage = Stage::offered;  // the receiver copies from our buffer, or release() buffers it
    wake(key.dst);
  }
  return offer;
}

void LocalWorld::sender_delivers_locked(std::unique_lock<std::mutex>& lock, Slot& slot, int dst) {
  slot.stage = Stage::copying;
  lock.unlock();
  deliver(slot.target, slot.message);
  relock(lock);
  slot.stage = Stage::delivered;
  slot.sender_done = true;
  wake(dst);
}

void LocalWorld::release(const MailboxKey& key, const Offer& offer) {
  if (offer.delivered) return;
  // Usually the receiver is copying from our buffer or about to: it wakes us when done, so
  // wait for that before taking the lock (which it needs to say so). It also wakes us when it
  // posts a receive we should push into: that copy is ours to make, and it waits for it.
  Serving serving(*this, key.src);
  const bool woken = offer.spin && spin_until_woken(key.src, offer.wakeups);
  auto lock = lock_world();
  push_owed_locked(lock, key.src);
  Mailbox& box = mailboxes_[key];
  auto it = box.slots.find(offer.number);
  if (it == box.slots.end() || it->second.sender_done) return;  // delivered (and maybe gone)
  Slot& slot = it->second;
  // The wake-up was for something else: give the receiver its chance to copy (one copy).
  if (slot.stage == Stage::offered && woken) spin_for_wakeup(lock, key.src);
  if (slot.stage == Stage::offered) {
    // The receiver is late: keep the data in a spare buffer, so our buffer is free again.
    slot.stage = Stage::copying;
    if (!box.spare_buffers.empty()) {
      slot.spare = std::move(box.spare_buffers.back());
      box.spare_buffers.pop_back();
    }
    lock.unlock();
    if (slot.message.data) {
      if (slot.spare.size() < static_cast<size_t>(slot.message.bytes))
        slot.spare.resize(static_cast<size_t>(slot.message.bytes));
      copy_bytes(slot.spare.data(), DeviceKind::cpu, slot.message.data, slot.message.kind,
                 slot.message.bytes);
      slot.message.data = slot.spare.data();
      slot.message.kind = DeviceKind::cpu;
    }
    relock(lock);
    slot.stage = Stage::buffered;
    wake(key.dst);
  } else {
    wait_copy_locked(lock, key.src, slot);  // the receiver is copying from our buffer
  }
  slot.sender_done = true;
  finish_slot_locked(box, offer.number);
}

int64_t LocalWorld::reserve_locked(Mailbox& box, const Incoming& target, int src, int dst) {
  const int64_t number = box.reserved++;
  Slot& slot = slot_locked(box, number);
  slot.target = target;
  slot.receiver_posted = true;
  if (slot.stage == Stage::offered && slot.message.bytes == target.bytes &&
      sender_pushes(src, target, slot.message)) {
    slot.push = true;  // the sender copies: tell it
    owed_pushes_[src].push_back({&box, number, dst});
    wake(src);
  }
  return number;
}

bool LocalWorld::sender_pushes(int sender, const Incoming& target, const Outgoing& message) const {
  if (!own_cores_ || target.accumulate || !target.data || !message.data) return false;
  if (target.bytes > push_limit_) return false;  // the lines it read are no longer all cached
  if (target.kind != DeviceKind::cpu || message.kind != DeviceKind::cpu) return false;
  const auto* begin = static_cast<const std::byte*>(target.data);
  const auto* end = begin + target.bytes;
  for (const auto& [read, bytes] : recent_reads_[sender].regions)
    if (read && read < end && begin < read + bytes) return true;
  return false;
}

void LocalWorld::remember_read(int rank, const Outgoing& message) {
  if (!message.data || message.kind != DeviceKind::cpu) return;
  RecentReads& recent = recent_reads_[rank];
  recent.regions[recent.next] = {static_cast<const std::byte*>(message.data), message.bytes};
  recent.next = (recent.next + 1) % static_cast<int>(recent.regions.size());
}

void LocalWorld::push_owed_locked(std::unique_lock<std::mutex>& lock, int rank) {
  std::vector<OwedPush>& owed = owed_pushes_[rank];
  while (!owed.empty()) {
    const OwedPush push = owed.back();
    owed.pop_back();
    auto it = push.box->slots.find(push.number);
    // Gone, or the receiver stopped waiting for us and copied itself, or left on an error.
    if (it == push.box->slots.end() || it->second.stage != Stage::offered ||
        !it->second.receiver_posted)
      continue;
    sender_delivers_locked(lock, it->second, push.dst);
    finish_slot_locked(*push.box, push.number);
  }
}

// The receiver of a push waits for it while its sender is in a wait that makes pushes (or for
// kPushGrace, for a sender that is about to be), making its own meanwhile; then it copies itself.
// The wait is short and never registered: a push never makes anyone wait on a busy rank.
void LocalWorld::wait_for_push_locked(std::unique_lock<std::mutex>& lock, int src, int waiter,
                                      const Slot& slot) {
  Serving serving(*this, waiter);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    push_owed_locked(lock, waiter);
    if (slot.stage != Stage::offered) return;
    const uint64_t seen = wakeup_counts_[waiter].value.load(std::memory_order_acquire);
    bool give_up = false;
    lock.unlock();
    while (!give_up && wakeup_counts_[waiter].value.load(std::memory_order_acquire) == seen) {
      const auto waited = std::chrono::steady_clock::now() - start;
      give_up =
          waited > kSpin || (waited > kPushGrace && !serving_[src].load(std::memory_order_acquire));
      cpu_relax();
    }
    relock(lock);
    if (give_up) {
      push_owed_locked(lock, waiter);
      return;
    }
  }
}

int64_t LocalWorld::reserve(const MailboxKey& key, const Incoming& target) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  return reserve_locked(mailboxes_[key], target, key.src, key.dst);
}

Arrived LocalWorld::take(const MailboxKey& key, int64_t ticket, int waiter,
                         const std::function<std::string()>& describe) {
  auto lock = lock_world();
  return take_locked(lock, mailboxes_[key], ticket, key.src, waiter, describe);
}

Arrived LocalWorld::receive(const MailboxKey& key, const Incoming& target, int waiter,
                            const std::function<std::string()>& describe) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  Mailbox& box = mailboxes_[key];
  return take_locked(lock, box, reserve_locked(box, target, key.src, key.dst), key.src, waiter,
                     describe);
}

Arrived LocalWorld::take_locked(std::unique_lock<std::mutex>& lock, Mailbox& box, int64_t ticket,
                                int src, int waiter, const std::function<std::string()>& describe) {
  Slot& slot = box.slots.at(ticket);
  try {
    wait_locked(lock, waiter, describe, [&slot] {
      return slot.stage == Stage::offered || slot.stage == Stage::buffered ||
             slot.stage == Stage::delivered;
    });
  } catch (...) {
    // Leaving on an error: nobody may copy into our buffer after we are gone.
    wait_copy_locked(lock, waiter, slot);
    slot.receiver_posted = false;
    slot.target = Incoming{};
    throw;
  }
  Arrived arrived{slot.message.bytes, slot.message.sent};
  if (slot.message.bytes != slot.target.bytes) {
    slot.receiver_done = true;  // a size mismatch: the caller reports it
    if (slot.stage == Stage::buffered) finish_slot_locked(box, ticket);
    return arrived;
  }
  if (slot.stage == Stage::offered && slot.push) wait_for_push_locked(lock, src, waiter, slot);
  wait_copy_locked(lock, waiter, slot);  // the sender may be pushing
  if (slot.stage != Stage::delivered) {
    const Stage was = slot.stage;
    if (was == Stage::offered) remember_read(waiter, slot.message);
    slot.stage = Stage::copying;
    lock.unlock();
    deliver(slot.target, slot.message);
    relock(lock);
    slot.stage = Stage::delivered;
    if (was == Stage::offered) wake(src);  // the sender may wait for its buffer back
  }
  slot.receiver_done = true;
  finish_slot_locked(box, ticket);
  return arrived;
}

void LocalWorld::wait_copy_locked(std::unique_lock<std::mutex>& lock, int waiter,
                                  const Slot& slot) {
  while (slot.stage == Stage::copying)
    if (!spin_for_wakeup(lock, waiter) && slot.stage == Stage::copying)
      wakeups_[waiter].wait_for(lock, std::chrono::milliseconds(1));
}

void LocalWorld::check_collective(const std::string& group_key, const std::string& group_name,
                                  int64_t seq, int members, int world_rank,
                                  const std::string& call) {
  auto lock = lock_world();
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
  const auto values = gather(group_key, id, members, my_index, {value.first, value.second}, what);
  std::vector<std::pair<int, int>> pairs;
  for (const auto& v : values) pairs.emplace_back(static_cast<int>(v[0]), static_cast<int>(v[1]));
  return pairs;
}

std::vector<std::vector<int64_t>> LocalWorld::gather(const std::string& group_key, int64_t id,
                                                     const std::vector<int>& members, int my_index,
                                                     std::vector<int64_t> value,
                                                     const std::string& what) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  auto key = std::make_pair(group_key, id);
  Rendezvous& rv = rendezvous_[key];
  rv.values.resize(members.size());
  rv.values[my_index] = std::move(value);
  ++rv.arrived;
  for (int m : members) wake(m);
  int n = static_cast<int>(members.size());
  wait_locked(
      lock, members[my_index], [&what] { return what; }, [&rv, n] { return rv.arrived == n; });
  auto values = rv.values;
  if (++rv.departed == n) rendezvous_.erase(key);
  return values;
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

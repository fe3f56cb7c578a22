// Pushes: with a core each, a sender copies into a receive buffer it has just read from (its
// cache holds those lines); which messages qualify, the copies a sender owes, the receiver's wait.
#include "core/comm/local/local_world.h"

#include <chrono>

#include "core/comm/local/local_world_internal.h"

namespace mgpu::comm::local {

using detail::cpu_relax;
using detail::kSpin;

namespace {

// How long a receiver waits for a push from a sender that is not yet in a wait: in a collective's
// step both partners arrive within a microsecond or two of each other.
constexpr auto kPushGrace = std::chrono::microseconds(4);

}  // namespace

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

}  // namespace mgpu::comm::local

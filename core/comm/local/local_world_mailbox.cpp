// Point-to-point in a thread world: a message's slot in its mailbox, the sender's offer and
// release, and the receiver's reserve and take (one copy, by whichever side should make it).
#include "core/comm/local/local_world.h"

#include <chrono>
#include <cstring>

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

// When ranks share cores, a late receiver of a message this small costs the sender less as a
// copy into a spare buffer than as a spin: a 64 KiB copy is a few microseconds, a spin up to
// kSpin and often a lost core. With a core each, the receiver is running and the spin is cheap.
constexpr int64_t kSpareRatherThanSpin = 256 * 1024;

}  // namespace

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

}  // namespace mgpu::comm::local

#include "core/runtime/allocator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace mgpu {

namespace {
DeviceMemoryHooks g_hooks[3];
constexpr size_t kAlign = 64;
}  // namespace

void set_device_memory_hooks(DeviceKind kind, DeviceMemoryHooks hooks) {
  g_hooks[static_cast<int>(kind)] = hooks;
}

const DeviceMemoryHooks& device_memory_hooks(DeviceKind kind) {
  return g_hooks[static_cast<int>(kind)];
}

const char* category_name(MemCategory c) {
  static const char* names[] = {"parameters",  "gradients",    "optimizer_state",
                                "activations", "comm_buffers", "workspace"};
  return names[static_cast<int>(c)];
}

// The allocator's books, shared by the Allocator handle and every Storage it handed out (so a
// tensor that outlives its rank's allocator still frees correctly).
struct Storage::State {
  Device device;
  mutable std::mutex mutex;
  MemoryStats stats;
  std::function<void(const MemoryStats&)> listener;

  void notify() {
    if (listener) listener(stats);
  }
};

Storage::~Storage() {
  MemoryStats snapshot;
  std::function<void(const MemoryStats&)> listener;
  {
    std::lock_guard lock(owner_->mutex);
    owner_->stats.current[static_cast<int>(category_)] -= bytes_;
    owner_->stats.total -= bytes_;
    snapshot = owner_->stats;
    listener = owner_->listener;
  }
  if (data_) {
    if (owner_->device.kind == DeviceKind::cpu) {
      std::free(data_);
    } else if (auto& h = g_hooks[static_cast<int>(owner_->device.kind)]; h.release) {
      h.release(data_, owner_->device.index);
    }
  }
  if (listener) listener(snapshot);
}

const Device& Storage::device() const {
  return owner_->device;
}

Allocator::Allocator(Device device, int64_t capacity_bytes)
    : state_(std::make_shared<Storage::State>()) {
  state_->device = device;
  state_->stats.capacity = capacity_bytes;
}

std::shared_ptr<Storage> Allocator::allocate(int64_t bytes, MemCategory category) {
  if (bytes < 0) throw std::invalid_argument("allocation of negative size");
  MemoryStats snapshot;
  {
    std::lock_guard lock(state_->mutex);
    auto& s = state_->stats;
    if (s.capacity > 0 && s.total + bytes > s.capacity) {
      throw OutOfMemory(
          fmt::format("out of memory on {}: allocating {} of {} would need {} but the capacity "
                      "is {}\n{}",
                      state_->device.str(), format_bytes(bytes), category_name(category),
                      format_bytes(s.total + bytes), format_bytes(s.capacity), breakdown()),
          s);
    }
    int c = static_cast<int>(category);
    s.current[c] += bytes;
    s.peak[c] = std::max(s.peak[c], s.current[c]);
    s.window_peak[c] = std::max(s.window_peak[c], s.current[c]);
    s.total += bytes;
    s.peak_total = std::max(s.peak_total, s.total);
    snapshot = s;
  }
  void* data = nullptr;
  if (bytes > 0) {
    if (state_->device.kind == DeviceKind::cpu) {
      size_t rounded = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
      data = std::aligned_alloc(kAlign, rounded);
      if (!data) throw std::bad_alloc();
      std::memset(data, 0, rounded);
    } else if (state_->device.kind == DeviceKind::cuda) {
      auto& h = g_hooks[static_cast<int>(DeviceKind::cuda)];
      if (!h.allocate)
        throw std::runtime_error("this build has no CUDA support (rebuild with CUDA)");
      data = h.allocate(bytes, state_->device.index);
    }
  }
  // The Storage constructor is private; this is the one place that builds one.
  std::shared_ptr<Storage> storage(new Storage(state_, data, bytes, category));  // NOLINT
  if (state_->listener) state_->listener(snapshot);
  return storage;
}

const Device& Allocator::device() const {
  return state_->device;
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

int64_t Allocator::capacity() const {
  return stats().capacity;
}

void Allocator::set_capacity(int64_t bytes) {
  std::lock_guard lock(state_->mutex);
  state_->stats.capacity = bytes;
}

void Allocator::reset_peaks() {
  std::lock_guard lock(state_->mutex);
  state_->stats.peak = state_->stats.current;
  state_->stats.peak_total = state_->stats.total;
}

void Allocator::start_window() {
  std::lock_guard lock(state_->mutex);
  state_->stats.window_peak = state_->stats.current;
}

void Allocator::set_listener(std::function<void(const MemoryStats&)> listener) {
  std::lock_guard lock(state_->mutex);
  state_->listener = std::move(listener);
}

std::string Allocator::breakdown() const {
  // Called with or without the mutex held by allocate(): read the stats without locking there.
  const MemoryStats& s = state_->stats;
  std::string out = fmt::format("  {:<16} {:>12} {:>12}\n", "category", "current", "peak");
  for (int c = 0; c < kNumMemCategories; ++c) {
    out += fmt::format("  {:<16} {:>12} {:>12}\n", category_name(static_cast<MemCategory>(c)),
                       format_bytes(s.current[c]), format_bytes(s.peak[c]));
  }
  out += fmt::format("  {:<16} {:>12} {:>12}", "total", format_bytes(s.total),
                     format_bytes(s.peak_total));
  if (s.capacity > 0) out += fmt::format("   (capacity {})", format_bytes(s.capacity));
  return out;
}

std::string format_bytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (std::abs(b) < 1024) return fmt::format("{} B", bytes);
  if (std::abs(b) < 1024.0 * 1024) return fmt::format("{:.2f} KiB", b / 1024);
  if (std::abs(b) < 1024.0 * 1024 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

}  // namespace mgpu

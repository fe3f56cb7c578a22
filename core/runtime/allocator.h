// Per-rank memory accounting. Every allocation names what it is for (a MemCategory); the
// allocator tracks current and peak bytes per category and enforces the rank's capacity, so a
// lesson can show where memory goes and an oversized model fails with a readable breakdown.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/runtime/device.h"

namespace mgpu {

enum class MemCategory : uint8_t {
  parameters,
  gradients,
  optimizer_state,
  activations,
  comm_buffers,
  workspace,
};
constexpr int kNumMemCategories = 6;
const char* category_name(MemCategory c);  // "parameters", "gradients", ...

using CategoryBytes = std::array<int64_t, kNumMemCategories>;
// The bytes of one category in a per-category array.
inline int64_t at(const CategoryBytes& bytes, MemCategory category) {
  return bytes[static_cast<int>(category)];
}

struct MemoryStats {
  CategoryBytes current{};
  CategoryBytes peak{};         // per-category high-water marks (need not coincide in time)
  CategoryBytes window_peak{};  // the same since the last start_window() (e.g. one step)
  int64_t total = 0;            // sum of current
  int64_t peak_total = 0;       // high-water mark of the sum
  int64_t capacity = 0;         // 0 = unlimited
};

// Thrown when an allocation would exceed the rank's capacity; what() holds the breakdown.
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string& msg, MemoryStats stats) : std::runtime_error(msg), stats_(stats) {}
  const MemoryStats& stats() const { return stats_; }

 private:
  MemoryStats stats_;
};

class Allocator;

// One block of device memory. Frees itself (and updates its allocator's books) when the last
// tensor that views it goes away. Phantom storage has bytes but no data.
class Storage {
 public:
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }
  const Device& device() const;

 private:
  friend class Allocator;
  struct State;
  Storage(std::shared_ptr<State> owner, void* data, int64_t bytes, MemCategory c)
      : owner_(std::move(owner)), data_(data), bytes_(bytes), category_(c) {}
  std::shared_ptr<State> owner_;
  void* data_;
  int64_t bytes_;
  MemCategory category_;
};

// Hooks that move real device memory; the CUDA module installs its own for DeviceKind::cuda.
struct DeviceMemoryHooks {
  void* (*allocate)(int64_t bytes, int device_index) = nullptr;
  void (*release)(void* ptr, int device_index) = nullptr;
  // Copies between any two pointers of this kind and/or the host (unified addressing).
  void (*copy)(void* dst, const void* src, int64_t bytes) = nullptr;
};
const DeviceMemoryHooks& device_memory_hooks(DeviceKind kind);
void set_device_memory_hooks(DeviceKind kind, DeviceMemoryHooks hooks);

class Allocator {
 public:
  explicit Allocator(Device device = Device::cpu(), int64_t capacity_bytes = 0);

  // Allocates `bytes` for `category`; throws OutOfMemory when it would pass the capacity.
  // CPU memory is zero-filled and 64-byte aligned.
  std::shared_ptr<Storage> allocate(int64_t bytes, MemCategory category);

  const Device& device() const;
  MemoryStats stats() const;
  int64_t capacity() const;
  void set_capacity(int64_t bytes);
  void reset_peaks();   // peaks := current (forgets everything before: prefer start_window)
  void start_window();  // window_peak := current; `peak` keeps the whole run's high-water marks

  // Called (on the allocating thread) after every allocation and release; the tracer uses it to
  // emit memory counter events.
  void set_listener(std::function<void(const MemoryStats&)> listener);

  // A table of current/peak bytes per category, e.g. for the OOM message and lesson summaries.
  std::string breakdown() const;

 private:
  std::shared_ptr<Storage::State> state_;
};

// Lifts an allocator's capacity while it lives, then restores it: for set-up copies that are not
// part of training (the full model a shard or a pipeline stage is cut from, a checkpoint's full
// model). What is allocated meanwhile stays counted; only the limit is off.
class CapacityLifted {
 public:
  explicit CapacityLifted(Allocator& allocator)
      : allocator_(allocator), capacity_(allocator.capacity()) {
    allocator_.set_capacity(0);
  }
  ~CapacityLifted() { allocator_.set_capacity(capacity_); }
  CapacityLifted(const CapacityLifted&) = delete;
  CapacityLifted& operator=(const CapacityLifted&) = delete;

 private:
  Allocator& allocator_;
  int64_t capacity_;
};

// Human-readable byte counts: "512 B", "1.50 KiB", "3.20 MiB", "1.07 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace mgpu

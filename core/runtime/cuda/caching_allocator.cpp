// A caching allocator for GPU memory, the idea of PyTorch's in its simplest form.
//
// cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device), and a training step
// frees and re-allocates the same activation sizes every step. So a released block is not given
// back to the driver: it goes on a free list keyed by (device, stream, size class) and the next
// request of that size class reuses it.
//
// Why the stream is part of the key: a block freed by the host may still be in use by kernels
// queued on the stream that used it. Reusing it only for work on that SAME stream is safe
// without any synchronization, because a stream runs its work in order. Each rank thread has its
// own compute stream, so ranks sharing one GPU never hand each other a busy block.
//
// Streams end (rank threads exit, their streams are synchronized and destroyed): retire_stream
// then re-keys that stream's blocks to "no stream" (nullptr), a pool any stream may take from. A
// live block whose stream retired goes back, when freed, to the pool of the freeing thread's
// stream (the rank that used it), or to the no-stream pool if that thread has none.
//
// Size classes: requests round up to 512 bytes (small) or to a power-of-two quarter step (large:
// 1, 1.25, 1.5, 1.75 x 2^k), which bounds the waste at 25% while letting similar sizes share.
#include "core/runtime/cuda/caching_allocator.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/runtime/cuda/streams.h"
#include "core/runtime/gpu.h"

namespace mgpu::cuda {

namespace {

size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512;
  if (bytes <= (1u << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t pow2 = 1;
  while (pow2 * 2 <= bytes) pow2 *= 2;
  size_t step = pow2 / 4;
  return (bytes + step - 1) / step * step;
}

struct Block {
  int device = 0;
  cudaStream_t stream = nullptr;
  size_t bytes = 0;  // the size class actually allocated
};

struct PoolKey {
  int device;
  cudaStream_t stream;
  size_t bytes;
  bool operator<(const PoolKey& o) const {
    return std::tie(device, stream, bytes) < std::tie(o.device, o.stream, o.bytes);
  }
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<void*, Block> live;       // handed out
  std::map<PoolKey, std::vector<void*>> free;  // cached, ready for reuse on the same stream
  int64_t cached = 0;

  // Gives every cached block back to the driver. Caller holds the mutex.
  void release_all_locked() {
    for (auto& [key, ptrs] : free) {
      cudaSetDevice(key.device);
      for (void* p : ptrs) cudaFree(p);
    }
    free.clear();
    cached = 0;
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: blocks may be freed during static teardown
  return *c;
}

void* allocate(int64_t bytes, int device_index) {
  const int device = device_index;
  cudaStream_t stream = compute_stream(device);  // also makes `device` current
  const size_t rounded = size_class(static_cast<size_t>(bytes));
  Cache& c = cache();
  void* ptr = nullptr;
  {
    std::lock_guard lock(c.mutex);
    for (cudaStream_t owner : {stream, static_cast<cudaStream_t>(nullptr)}) {  // mine, then retired
      auto it = c.free.find({device, owner, rounded});
      if (it != c.free.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
        c.cached -= static_cast<int64_t>(rounded);
        break;
      }
    }
  }
  if (!ptr) {
    cudaError_t status = cudaMalloc(&ptr, rounded);
    if (status == cudaErrorMemoryAllocation) {  // maybe the cache holds the memory we need
      cudaGetLastError();                       // clear the sticky-free error
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      {
        std::lock_guard lock(c.mutex);
        c.release_all_locked();
      }
      status = cudaMalloc(&ptr, rounded);
    }
    check(status, "cudaMalloc");
  }
  {
    std::lock_guard lock(c.mutex);
    c.live[ptr] = {device, stream, rounded};
  }
  // Core's contract: new tensors are zero-filled (gradients accumulate into them). Queued on the
  // same stream as the kernels that will use the block, so it is ordered before them.
  check(cudaMemsetAsync(ptr, 0, static_cast<size_t>(bytes), stream), "cudaMemsetAsync");
  return ptr;
}

void release(void* ptr, int device_index) {
  (void)device_index;
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  auto it = c.live.find(ptr);
  if (it == c.live.end()) return;  // not ours (cannot happen through core's Allocator)
  Block b = it->second;
  c.live.erase(it);
  if (!b.stream) b.stream = existing_compute_stream(b.device);  // owner retired: the freer's
  c.free[{b.device, b.stream, b.bytes}].push_back(ptr);
  c.cached += static_cast<int64_t>(b.bytes);
}

// Host<->device or device<->device; queued on the calling rank's compute stream (so it sees the
// results of that rank's kernels) and waited for, since callers read or reuse the buffer at once.
void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  cudaStream_t stream = compute_stream();
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(copy)");
}

}  // namespace

DeviceMemoryHooks caching_allocator_hooks() {
  return {allocate, release, copy};
}

void retire_stream(void* stream_ptr) noexcept {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (auto& [ptr, block] : c.live)
    if (block.stream == stream) block.stream = nullptr;
  for (auto it = c.free.begin(); it != c.free.end();) {
    if (it->first.stream != stream) {
      ++it;
      continue;
    }
    auto& shared = c.free[{it->first.device, nullptr, it->first.bytes}];
    shared.insert(shared.end(), it->second.begin(), it->second.end());
    it = c.free.erase(it);
  }
}

int64_t cached_bytes() {
  std::lock_guard lock(cache().mutex);
  return cache().cached;
}

void release_cached() {
  std::lock_guard lock(cache().mutex);
  cache().release_all_locked();
}

}  // namespace mgpu::cuda

// Internal to core/comm/local/local_world*.cpp: how a waiting rank spins, shared by the waits
// (local_world.cpp) and a receiver's wait for its sender's push (local_world_push.cpp).
#pragma once
#include <chrono>

namespace mgpu::comm::local::detail {

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
inline constexpr auto kSpin = std::chrono::microseconds(30);

}  // namespace mgpu::comm::local::detail

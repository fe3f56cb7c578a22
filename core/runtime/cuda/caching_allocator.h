// The caching allocator behind DeviceKind::cuda tensors (see caching_allocator.cpp).
#pragma once
#include "core/runtime/allocator.h"

namespace mgpu::cuda {

// The DeviceMemoryHooks that core's Allocator calls for cuda tensors. The Allocator keeps the
// books (categories, peaks, capacity); these hooks only move real memory.
DeviceMemoryHooks caching_allocator_hooks();

// Called when a thread's compute stream is destroyed, after synchronizing it: its cached blocks
// (and the live blocks it owned) no longer belong to any stream and may be reused by any.
void retire_stream(void* stream) noexcept;

}  // namespace mgpu::cuda

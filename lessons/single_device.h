// The single-device baseline, callable from tests and other lessons.
#pragma once
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/runtime/allocator.h"
#include "core/runtime/trace_event.h"
#include "lessons/lesson.h"

namespace mgpu::lessons {

struct SingleDeviceResult {
  std::vector<float> losses;  // one per step run
  int64_t params = 0;
  double wall_seconds = 0;
  double modeled_seconds = 0;
  MemoryStats memory;
  trace::Trace trace;
};

SingleDeviceResult train_single_device(const CommonOptions& c, std::ostream& out);
std::unique_ptr<Lesson> make_single_device_lesson();

}  // namespace mgpu::lessons

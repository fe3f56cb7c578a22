// The hybrid lesson: DP x TP x PP on the device mesh.
#pragma once
#include <memory>

#include "lessons/lesson.h"

namespace mgpu::lessons {

std::unique_ptr<Lesson> make_hybrid_lesson();

}  // namespace mgpu::lessons

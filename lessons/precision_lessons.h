// The two lessons on a device's memory levers, each comparing single-device runs of the one
// training loop side by side (lessons/training.h: train_measured).
#pragma once
#include <memory>

#include "lessons/lesson.h"

namespace mgpu::lessons {

std::unique_ptr<Lesson> make_mixed_precision_lesson();  // fp32 vs bf16 vs fp16 (+/- scaling)
std::unique_ptr<Lesson> make_activation_checkpointing_lesson();  // recompute none/selective/full

}  // namespace mgpu::lessons

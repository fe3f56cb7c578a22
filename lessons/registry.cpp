// Every lesson, in teaching order. Adding a lesson: write lessons/NAME.cpp with a Lesson
// subclass and a make_NAME_lesson() factory, then list it here.
#include "lessons/collectives.h"
#include "lessons/context_parallel.h"
#include "lessons/ddp.h"
#include "lessons/expert_parallel.h"
#include "lessons/faults.h"
#include "lessons/hybrid.h"
#include "lessons/lesson.h"
#include "lessons/pipeline.h"
#include "lessons/plan.h"
#include "lessons/precision_lessons.h"
#include "lessons/sequence_parallel.h"
#include "lessons/single_device.h"
#include "lessons/tensor_parallel.h"
#include "lessons/zero.h"

namespace mgpu::lessons {

std::vector<std::unique_ptr<Lesson>> all_lessons() {
  std::vector<std::unique_ptr<Lesson>> lessons;
  lessons.push_back(make_single_device_lesson());
  lessons.push_back(make_collectives_lesson());
  lessons.push_back(make_data_parallel_lesson());
  lessons.push_back(make_ddp_lesson());
  lessons.push_back(make_grad_accum_lesson());
  lessons.push_back(make_model_parallel_lesson());
  lessons.push_back(make_pipeline_lesson());
  lessons.push_back(make_tensor_parallel_lesson());
  lessons.push_back(make_sequence_parallel_lesson());
  lessons.push_back(make_context_parallel_lesson());
  lessons.push_back(make_expert_parallel_lesson());
  lessons.push_back(make_mixed_precision_lesson());
  lessons.push_back(make_activation_checkpointing_lesson());
  lessons.push_back(make_zero_lesson());
  lessons.push_back(make_hybrid_lesson());
  lessons.push_back(make_recommendations_lesson());
  lessons.push_back(make_faults_lesson());
  return lessons;
}

}  // namespace mgpu::lessons
